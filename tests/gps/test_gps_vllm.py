from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.gps.vllm import FLAG, gpu_memory_utilization, render_vllm_args

H200 = 143771


def test_examples() -> None:
    assert gpu_memory_utilization(40_000, H200) == Decimal("0.27")  # 0.2782…
    assert gpu_memory_utilization(136_582, H200) == Decimal("0.94")  # 0.94999…: down, not to 0.95
    assert gpu_memory_utilization(H200, H200) == Decimal("1")
    assert gpu_memory_utilization(29, 100) == Decimal("0.29")  # float 0.29*100 == 28.999…


@given(gpu=st.integers(100, 300_000), data=st.data())
def test_utilization_never_exceeds_the_share_and_is_the_largest_such(
    gpu: int, data: st.DataObject
) -> None:
    mem = data.draw(st.integers(-(-gpu // 100), gpu))
    util = gpu_memory_utilization(mem, gpu)
    share = Fraction(mem, gpu)
    assert Fraction(str(util)) <= share < Fraction(str(util)) + Fraction(1, 100)
    assert util == util.quantize(Decimal("0.01"))


@pytest.mark.parametrize("mem", [0, 1, 1437, H200 + 1])
def test_out_of_range_memory_is_spec_invalid(mem: int) -> None:
    with pytest.raises(SpecInvalid) as exc:
        gpu_memory_utilization(mem, H200)
    assert exc.value.errors[0].path == "memory_mib"


def test_flag_is_appended() -> None:
    assert render_vllm_args(["--model", "/m", "--max-model-len", "8192"], 40_000, H200) == (
        "--model",
        "/m",
        "--max-model-len",
        "8192",
        FLAG,
        "0.27",
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "/m", "--gpu-memory-utilization", "0.27"],
        ["--model", "/m", "--gpu-memory-utilization=0.270"],
        ["--gpu_memory_utilization", "0.27", "--model", "/m"],
    ],
)
def test_an_equal_user_value_is_accepted_once(args: list[str]) -> None:
    assert render_vllm_args(args, 40_000, H200) == tuple(args)


@pytest.mark.parametrize(
    ("args", "path", "reason"),
    [
        (
            ["--model", "/m", "--max-model-len", "8", "--gpu-memory-utilization", "0.9"],
            "args[4]",
            "gpu_memory_utilization_conflict",
        ),
        (
            ["--model", "/m", "--gpu-memory-utilization=0.9"],
            "args[2]",
            "gpu_memory_utilization_conflict",
        ),
        (["--gpu_memory_utilization=abc"], "args[0]", "gpu_memory_utilization_conflict"),
        (
            ["--model", "/m", "--gpu-memory-utilization"],
            "args[2]",
            "gpu_memory_utilization_missing_value",
        ),
    ],
)
def test_a_contradicting_user_value_is_rejected(args: list[str], path: str, reason: str) -> None:
    with pytest.raises(SpecInvalid) as exc:
        render_vllm_args(args, 40_000, H200)
    (err,) = exc.value.errors
    assert (err.path, err.reason) == (path, reason)
    assert "0.27" in err.fix and "memory_mib" in err.fix


def test_each_contradiction_is_reported() -> None:
    with pytest.raises(SpecInvalid) as exc:
        render_vllm_args(
            [
                "--gpu-memory-utilization",
                "0.5",
                "--gpu-memory-utilization=0.27",
                "--gpu-memory-utilization=0.6",
            ],
            40_000,
            H200,
            path="spec.args",
        )
    assert [e.path for e in exc.value.errors] == ["spec.args[0]", "spec.args[3]"]
