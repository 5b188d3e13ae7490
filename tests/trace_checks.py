"""Checks of a written Perfetto trace file, shared by the tracing tests."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def load_trace(path: Path) -> dict[str, Any]:
    def reject(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=reject)


def tracks(trace: dict[str, Any]) -> dict[str, set[str]]:
    """Process name -> names of its thread tracks."""
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    tracks: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e["name"] == "thread_name":
            tracks[processes[e["pid"]]].add(e["args"]["name"])
    return tracks


def names(trace: dict[str, Any], process: str, ph: str) -> set[str]:
    events = trace["traceEvents"]
    pids = {
        e["pid"] for e in events if e["name"] == "process_name" and e["args"]["name"] == process
    }
    return {e["name"] for e in events if e["ph"] == ph and e["pid"] in pids}


def assert_well_formed(trace: dict[str, Any]) -> None:
    """Every span is on a named track; per track, ts never goes back and slices nest."""
    events = trace["traceEvents"]
    named = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    per_track: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in named, f"span on an unnamed track: {e}"
            assert e["dur"] >= 0, e
            # Integer nanoseconds: the file prints exact microseconds with three decimals.
            begin = round(e["ts"] * 1000)
            per_track[(e["pid"], e["tid"])].append((begin, begin + round(e["dur"] * 1000)))
        else:
            assert e["ph"] in ("M", "C"), e
    assert per_track, "no spans"
    for track, spans in per_track.items():
        open_ends: list[int] = []
        previous = -1
        for begin, end in spans:
            assert begin >= previous, f"timestamps go backwards on track {track}"
            previous = begin
            while open_ends and open_ends[-1] <= begin:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"slices overlap on track {track}"
            open_ends.append(end)
