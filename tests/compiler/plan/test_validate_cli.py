"""`loom validate`, the JSON Schema and the native decoder on the example, good and malformed plans.

tests/data/plans/malformed/expected.tsv gives, for every malformed file, the JSON path the decoder
reports and part of its message; `loom validate` must report the same path, whichever of its checks
(size, UTF-8, JSON syntax, schema, decoder) finds the problem first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import loom
import pytest
from loom.plan import schema, validate
from loom.tools import cli

try:
    from loom import _native
except ImportError as error:  # pragma: no cover - the native build is part of the normal set-up
    _native = None
    _NATIVE_MISSING = f"loom._native cannot be imported ({error}); build it with 'bash scripts/setup.sh'"
else:
    _NATIVE_MISSING = ""

needs_native = pytest.mark.skipif(_native is None, reason=_NATIVE_MISSING)

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "data" / "plans" / "malformed"
KITCHEN_SINK = REPO / "tests" / "data" / "plans" / "good" / "kitchen_sink_ll.json"
GOOD_PLANS = sorted((REPO / "examples" / "plans").glob("*.json")) + sorted(KITCHEN_SINK.parent.glob("*.json"))
LIMIT = 32 << 20


def _expectations() -> list[tuple[str, str, str]]:
    rows = []
    for line in (CORPUS / "expected.tsv").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            file, path, detail = line.split("\t")
            rows.append((file, path, detail))
    return rows


EXPECTED = _expectations()
EXPECTED_IDS = [row[0] for row in EXPECTED]

# Files that Python cannot read as JSON at all: refused at "$" before the schema check.
NOT_JSON = {"syntax_not_utf8.json", "syntax_trailing_garbage.json", "syntax_truncated.json", "syntax_utf8_bom.json"}

# Files whose problem the JSON Schema catches by itself. Every other readable file breaks a rule only
# the decoder checks (references between parts, duplicate keys, packet ops in
# "simple" plans), so the schema must accept it: the test below holds both directions.
SCHEMA_LEVEL = {
    "alignment_not_power_of_two.json",
    "broadcast_without_root.json",
    "channel_switch_with_peer.json",
    "chunk_local_names_channel.json",
    "enum_bad_buffer.json",
    "enum_bad_data_sync.json",
    "field_missing_in_op.json",
    "field_missing_remote_channel.json",
    "field_missing_top.json",
    "field_unknown_in_op.json",
    "field_unknown_top.json",
    "format_version_wrong.json",
    "gpus_empty.json",
    "id_list_duplicate.json",
    "loc_line_zero.json",
    "name_empty.json",
    "number_count_zero.json",
    "number_float_overflow.json",
    "number_fraction.json",
    "number_huge_float.json",
    "number_huge_integer.json",
    "number_negative.json",
    "op_unknown.json",
    "packet_dst_not_scratch.json",
    "pipeline_nested.json",
    "pipeline_zero_iterations.json",
    "syntax_not_an_object.json",
    "threads_not_warp_multiple.json",
    "type_array_for_object.json",
    "type_bool_for_string.json",
    "type_null_for_bool.json",
    "type_object_for_array.json",
    "type_op_not_object.json",
    "type_string_for_integer.json",
}


def _run_loom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loom", *args], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )


def _reported_path(line: str, origin: Path) -> str:
    """'INVALID <origin>: <json path>: <detail>' -> '<json path>'."""
    prefix = f"INVALID {origin}: "
    assert line.startswith(prefix), line
    return line[len(prefix) :].split(": ", 1)[0]


def _cli_validate(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    status = cli.main(["validate", str(path)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_corpus_files_are_all_listed_once() -> None:
    listed = [row[0] for row in EXPECTED]
    present = sorted(p.name for p in CORPUS.iterdir() if p.name != "expected.tsv")
    assert sorted(listed) == present
    assert len(present) >= 32
    assert NOT_JSON <= set(listed) and SCHEMA_LEVEL <= set(listed)


@needs_native
def test_good_plans_pass_the_command() -> None:
    result = _run_loom("validate", *map(str, GOOD_PLANS))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert [line.split()[1] for line in lines] == [str(p) for p in GOOD_PLANS]
    assert all(line.startswith("ok      ") for line in lines)
    assert f"ok      {KITCHEN_SINK} (allreduce, 2 ranks, ll)" in lines


@needs_native
@pytest.mark.parametrize("path", GOOD_PLANS, ids=[p.name for p in GOOD_PLANS])
def test_good_plans_pass_validate_plan_file(path: Path) -> None:
    plan = validate.validate_plan_file(path)
    assert plan.name == json.loads(path.read_text(encoding="utf-8"))["name"]
    assert schema.schema_errors(json.loads(path.read_text(encoding="utf-8"))) == []


@needs_native
def test_malformed_plans_fail_the_command_with_their_paths() -> None:
    paths = [CORPUS / file for file in EXPECTED_IDS]
    result = _run_loom("validate", *map(str, paths))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == len(paths), result.stderr
    for line, path, (_, json_path, _) in zip(lines, paths, EXPECTED, strict=True):
        assert _reported_path(line, path) == json_path, line


@needs_native
@pytest.mark.parametrize(("file", "json_path", "detail"), EXPECTED, ids=EXPECTED_IDS)
def test_malformed_plan_fails_validate_alone(
    capsys: pytest.CaptureFixture[str], file: str, json_path: str, detail: str
) -> None:
    status, out, err = _cli_validate(capsys, CORPUS / file)
    assert status == 1
    assert out == ""
    assert _reported_path(err.rstrip("\n"), CORPUS / file) == json_path


@needs_native
@pytest.mark.parametrize(("file", "json_path", "detail"), EXPECTED, ids=EXPECTED_IDS)
def test_decoder_reports_expected_path_and_detail(file: str, json_path: str, detail: str) -> None:
    with pytest.raises(loom.PlanError) as caught:
        loom.Plan.load(str(CORPUS / file))
    assert caught.value.path == json_path
    assert detail in caught.value.detail
    assert caught.value.origin == str(CORPUS / file)


@pytest.mark.parametrize(("file", "json_path", "detail"), EXPECTED, ids=EXPECTED_IDS)
def test_schema_alone_catches_exactly_the_schema_level_files(file: str, json_path: str, detail: str) -> None:
    if file in NOT_JSON:
        with pytest.raises(loom.PlanError) as caught:
            validate.read_plan_json(CORPUS / file)
        assert caught.value.path == "$"
        assert caught.value.detail.startswith("invalid JSON: ")
        return
    document = json.loads((CORPUS / file).read_bytes())
    errors = schema.schema_errors(document, str(CORPUS / file))
    if file in SCHEMA_LEVEL:
        assert json_path in [error.path for error in errors], [str(e) for e in errors]
    else:
        assert errors == []


def test_schema_points_at_a_repeated_id_like_the_decoder() -> None:
    document = json.loads((CORPUS / "id_list_duplicate.json").read_bytes())
    [error] = schema.schema_errors(document)
    assert (error.path, error.detail) == ("gpus[0].threadblocks[0].ops[1].channels[1]", "0 is listed twice")


@needs_native
def test_default_size_limit_matches_the_native_one() -> None:
    assert validate.DEFAULT_MAX_PLAN_BYTES == _native.DEFAULT_MAX_PLAN_BYTES == LIMIT


@pytest.fixture(scope="module")
def oversized_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 50 MB file: a valid plan followed by spaces, so only its size is wrong."""
    path = tmp_path_factory.mktemp("big") / "oversized.json"
    text = (REPO / "examples" / "plans" / "allreduce_2r_simple.json").read_bytes()
    path.write_bytes(text + b" " * ((50 << 20) - len(text)))
    return path


@needs_native
def test_oversized_plan_is_refused_by_both(capsys: pytest.CaptureFixture[str], oversized_plan: Path) -> None:
    detail = f"the plan is {50 << 20} bytes, over the limit of {LIMIT} bytes (LOOM_MAX_PLAN_BYTES raises it)"
    for load in (validate.validate_plan_file, loom.Plan.load):
        with pytest.raises(loom.PlanError) as caught:
            load(str(oversized_plan))
        assert (caught.value.path, caught.value.detail) == ("$", detail)
    status, _, err = _cli_validate(capsys, oversized_plan)
    assert status == 1
    assert err == f"INVALID {oversized_plan}: $: {detail}\n"


@needs_native
def test_size_limit_follows_the_environment(monkeypatch: pytest.MonkeyPatch, oversized_plan: Path) -> None:
    monkeypatch.setenv("LOOM_MAX_PLAN_BYTES", str(64 << 20))
    assert validate.validate_plan_file(oversized_plan).name == "allreduce_2r_simple"
    monkeypatch.setenv("LOOM_MAX_PLAN_BYTES", "100")
    small = REPO / "examples" / "plans" / "allreduce_2r_ll.json"
    for load in (validate.validate_plan_file, loom.Plan.load):
        with pytest.raises(loom.PlanError, match=r"over the limit of 100 bytes"):
            load(str(small))


@needs_native
@pytest.mark.parametrize("value", ["lots", "-1", "0", "12MB", " 100", "+100", "²", "١٢", "18446744073709551616"])
def test_garbage_size_limit_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LOOM_MAX_PLAN_BYTES", value)
    plan = GOOD_PLANS[0]
    with pytest.raises(loom.InvalidArgumentError) as python_error:
        validate.max_plan_bytes()
    assert str(python_error.value) == f"LOOM_MAX_PLAN_BYTES: expected a positive number of bytes, got '{value}'"
    with pytest.raises(loom.InvalidArgumentError) as native_error:
        loom.Plan.load(str(plan))
    assert str(native_error.value) == str(python_error.value)
    status, _, err = _cli_validate(capsys, plan)
    assert status == 1
    assert err == f"INVALID {python_error.value}\n"


@needs_native
@pytest.mark.parametrize("text", ["[" * 100000, "[" * 100000 + "]" * 100000, '{"a": ' * 100000 + "1" + "}" * 100000])
def test_deep_nesting_is_refused_by_both(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text(text, encoding="utf-8")
    for load in (validate.validate_plan_file, loom.Plan.load):
        with pytest.raises(loom.PlanError) as caught:
            load(str(path))
        assert caught.value.path == "$"
        assert caught.value.detail.startswith("invalid JSON: ")
    status, _, err = _cli_validate(capsys, path)
    assert status == 1
    assert err.startswith(f"INVALID {path}: $: invalid JSON: ")


@needs_native
def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS / "no_such_plan.json"
    with pytest.raises(loom.InvalidArgumentError) as caught:
        loom.Plan.load(str(path))
    assert str(caught.value) == f"cannot open plan file '{path}': No such file or directory"
    with pytest.raises(loom.InvalidArgumentError) as caught:
        validate.validate_plan_file(path)
    assert str(caught.value) == f"cannot open plan file '{path}': No such file or directory"
    status, out, err = _cli_validate(capsys, path)
    assert (status, out) == (1, "")
    assert err == f"INVALID cannot open plan file '{path}': No such file or directory\n"


@needs_native
def test_info_counts_every_op_of_the_kitchen_sink() -> None:
    result = _run_loom("info", "--json", str(KITCHEN_SINK))
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    # Both ranks run the same program: copy and put once more inside the pipeline body, a barrier in
    # each of the two thread blocks, every other op once.
    twice_per_rank = {"copy", "put", "barrier"}
    vocabulary = schema.plan_schema()["$defs"]["op_name"]["enum"]
    assert info["ops_by_type"] == {name: 4 if name in twice_per_rank else 2 for name in sorted(vocabulary)}
    assert len(vocabulary) == 27
    assert (info["threadblocks"], info["max_threadblocks_per_rank"], info["channels"]) == (4, 2, 6)
    # LL: packets take twice the data, in two halves (one per call parity), as the executor allocates it.
    assert (info["scratch_chunks_per_rank"], info["scratch_bytes_at_max_message"]) == (8, 8 * 4 * (1048576 // 4))
    assert (info["name"], info["protocol"], info["compiler_version"]) == ("kitchen_sink_ll", "ll", "0.1.0")


def test_info_counts_an_ll_alltoallv_plans_packet_regions():
    # Mailboxes (16 bytes per channel) and, per scratch chunk and half, a count packet and 64 KiB in packets.
    import loom
    from loom.compiler.driver import compile_algorithm
    from loom.tools.plan_info import plan_info

    info = plan_info(loom.Plan.parse(compile_algorithm("alltoallv_packet", 3)))
    assert info["scratch_bytes_at_max_message"] == 2 * 16 + 2 * 2 * (16 + 2 * 65536)
