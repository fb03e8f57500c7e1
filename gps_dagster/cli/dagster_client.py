"""The product's client of a Dagster webserver's GraphQL endpoint (``gps-dagster dagster ...``).

Runs by tag, a code-location reload, the runs in flight and their termination: what the CLI asks
of a running Dagster, the demo's ``dagster dev`` or a deployed webserver alike.
"""

# Decisions embodied here (docs/decisions.md):
# * “Demo stop terminates runs through the webserver first”

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any


def graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    """POST one query to ``<url>/graphql``; GraphQL errors raise."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        data: dict[str, Any] = json.loads(resp.read())
    if data.get("errors"):
        raise RuntimeError(f"GraphQL errors: {data['errors']}")
    return data["data"]  # type: ignore[no-any-return]


def runs_by_tag(url: str, key: str, value: str) -> list[dict[str, Any]]:
    """Runs carrying tag ``key=value``: id, job, status, tags, step stats (newest first)."""
    result = graphql(url, RUNS_QUERY, {"tags": [{"key": key, "value": value}]})["runsOrError"]
    if result.get("__typename") != "Runs":
        raise RuntimeError(f"runsOrError: {result}")
    return list(result["results"])


RELOAD_MUTATION = """
mutation Reload($location: String!) {
  reloadRepositoryLocation(repositoryLocationName: $location) {
    __typename
    ... on WorkspaceLocationEntry { name loadStatus }
    ... on PythonError { message }
    ... on RepositoryLocationNotFound { message }
    ... on UnauthorizedError { message }
  }
}
"""


def reload_code_location(url: str, location: str = "definitions.py") -> str:
    """Ask the webserver to reload a code location (new schedules get boundary schedules)."""
    result = graphql(url, RELOAD_MUTATION, {"location": location})["reloadRepositoryLocation"]
    if result.get("__typename") != "WorkspaceLocationEntry":
        raise RuntimeError(f"reload of {location} failed: {result}")
    return str(result.get("loadStatus"))


RUNS_QUERY = """
query GpsRuns($tags: [ExecutionTag!]) {
  runsOrError(filter: {tags: $tags}) {
    __typename
    ... on Runs {
      results {
        runId
        jobName
        status
        startTime
        endTime
        tags { key value }
        stepStats { stepKey status startTime endTime }
      }
    }
    ... on PythonError { message }
  }
}
"""


IN_FLIGHT = ["QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"]
IN_FLIGHT_QUERY = """
query GpsInFlight($statuses: [RunStatus!]) {
  runsOrError(filter: {statuses: $statuses}) {
    __typename
    ... on Runs { results { runId status } }
    ... on PythonError { message }
  }
}
"""
TERMINATE_MUTATION = """
mutation GpsTerminate($runIds: [String!]!) {
  terminateRuns(runIds: $runIds, terminatePolicy: SAFE_TERMINATE) { __typename }
}
"""


def runs_in_flight(url: str) -> list[str]:
    """Ids of the runs queued, starting, started or canceling on the instance behind ``url``."""
    result = graphql(url, IN_FLIGHT_QUERY, {"statuses": IN_FLIGHT})["runsOrError"]
    if result.get("__typename") != "Runs":
        raise RuntimeError(f"runsOrError: {result}")
    return [r["runId"] for r in result["results"]]


def terminate_in_flight(url: str, *, wait_s: float = 20.0) -> list[str]:
    """Terminate every run in flight the way the UI's Terminate button does (``terminateRuns``,
    SAFE_TERMINATE: the run launcher interrupts the run worker, which ends the run CANCELED),
    while the webserver and code server still live; wait up to ``wait_s`` for them to end.

    Stopping ``dagster dev`` first killed the run workers with the process group: their runs
    ended FAILURE, not canceled (R-DAG-9). Returns the ids it asked to stop."""
    ids = runs_in_flight(url)
    if not ids:
        return []
    graphql(url, TERMINATE_MUTATION, {"runIds": ids})
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and set(ids) & set(runs_in_flight(url)):
        time.sleep(0.5)
    return ids
