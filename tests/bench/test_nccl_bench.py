"""bench/nccl_bench.py without a GPU: the sides run in turns and each size keeps its median. (That it
refuses a run the library did not run on Loom: tests/nccl/test_nccl_library.py, with the real library.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("nccl_bench", ROOT / "bench" / "nccl_bench.py")
nccl_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nccl_bench)


def test_sides_run_in_turns_and_merge():
    order = []

    def run(side):
        order.append(side)
        return len(order)

    merged = nccl_bench.in_turns(3, run, "plain", "preloaded", lambda runs: runs)
    assert order == ["plain", "preloaded"] * 3
    assert merged == {"nccl": [1, 3, 5], "loom": [2, 4, 6]}


def test_torch_runs_keep_each_sizes_median():
    def run(eager_1k, graph_1k):
        return {
            "device": "H200",
            "results": [
                {"bytes": 1024, "eager_us": eager_1k, "graph_us": graph_1k},
                {"bytes": 2048, "eager_us": 20.0, "graph_us": 5.0},
            ],
        }

    merged = nccl_bench.merge_torch([run(30.0, 4.0), run(19.0, 9.0), run(21.0, 3.5)])
    assert merged["device"] == "H200"
    assert merged["results"] == [
        {
            "bytes": 1024,
            "eager_us": 21.0,
            "graph_us": 4.0,
            "eager_us_per_run": [30.0, 19.0, 21.0],
            "graph_us_per_run": [4.0, 9.0, 3.5],
        },
        {
            "bytes": 2048,
            "eager_us": 20.0,
            "graph_us": 5.0,
            "eager_us_per_run": [20.0, 20.0, 20.0],
            "graph_us_per_run": [5.0, 5.0, 5.0],
        },
    ]


def test_nccl_tests_runs_keep_medians_and_the_most_wrong():
    def row(out_us, in_us, out_wrong="0", in_wrong="0"):
        return [
            {
                "bytes": 8,
                "out_of_place_us": out_us,
                "out_of_place_wrong": out_wrong,
                "in_place_us": in_us,
                "in_place_wrong": in_wrong,
            }
        ]

    merged = nccl_bench.merge_nccl_tests([row(7.0, 6.0), row(9.0, 5.0, in_wrong="3"), row(8.0, 7.0)])
    assert merged == [
        {"bytes": 8, "out_of_place_us": 8.0, "out_of_place_wrong": "0", "in_place_us": 6.0, "in_place_wrong": "3"}
    ]
    assert nccl_bench.merge_nccl_tests([row(1.0, 1.0, "N/A"), row(1.0, 1.0, "0")])[0]["out_of_place_wrong"] == "0/N/A"


def test_split_group_times_merge_beside_the_default_groups():
    def run(split_graph):
        return {
            "device": "H100",
            "results": [{"bytes": 1024, "eager_us": 20.0, "graph_us": 4.0}],
            "split_results": [{"bytes": 1024, "eager_us": 21.0, "graph_us": split_graph}],
        }

    merged = nccl_bench.merge_torch([run(4.5), run(3.9), run(4.1)])
    assert merged["split_results"][0]["graph_us"] == 4.1
    assert merged["split_results"][0]["graph_us_per_run"] == [4.5, 3.9, 4.1]
    assert merged["results"][0]["graph_us"] == 4.0
