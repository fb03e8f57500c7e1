import sqlalchemy as sa

from gps_dagster.store.db import create_db_engine


def test_each_db_url_is_a_working_fresh_database(db_url: str) -> None:
    engine = create_db_engine(db_url)
    md = sa.MetaData()
    t = sa.Table("probe", md, sa.Column("x", sa.Integer, primary_key=True))
    md.create_all(engine)
    with engine.begin() as conn:
        conn.execute(t.insert().values(x=7))
    with engine.connect() as conn:
        assert conn.execute(sa.select(t.c.x)).scalar_one() == 7
    engine.dispose()
