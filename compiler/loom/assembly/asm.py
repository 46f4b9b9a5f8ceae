"""Plan assembly text to plan JSON (a dict), with errors that name the line and what was expected."""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import lark

from loom.assembly.ops import ALL_OPS, CHAIN_OPS, ID_LIST_OPS, LIST_FIELDS
from loom.errors import InvalidArgumentError, PlanError
from loom.plan.canonical import normalise_plan

GRAMMAR_PATH = Path(__file__).with_name("grammar.lark")

_REQUIRED_SETTINGS = (
    "plan",
    "collective",
    "protocol",
    "inplace",
    "world_size",
    "ranks_per_node",
    "threads_per_block",
    "message_bytes",
    "alignment_bytes",
)
_SETTING_FIELDS = {"plan_name": ("name",), "message_bytes": ("min_message_bytes", "max_message_bytes")}
_OUTSIDE_PIPELINE = {"TB", "RANK", "CHANNEL", "SEMAPHORE", "$END"}
_OP_TERMINALS = {"MOVE_OP", "REDUCING_OP", "CHANNEL_SYNC_OP", "SEMAPHORE_OP", "BARRIER", "NOP", "PIPELINE"}
_DESCRIPTIONS = {
    "NAME": "a name",
    "STRING": "a string in double quotes",
    "INT": "a number",
    "JSON_NUMBER": "a number",
    "BOOL": "true or false",
    "COLLECTIVE": (
        "a collective (allreduce, allgather, reducescatter, alltoall, alltoallv, broadcast, reduce, sendrecv)"
    ),
    "PROTOCOL": "a protocol (simple, ll)",
    "BUFFER": "a buffer name (input, output, scratch)",
    "REDUCE_OP": "a reduce operator (sum, min, max)",
    "PEER_CHANNEL": "a channel type (memory, port, switch)",
    "SWITCH": "",  # folded into PEER_CHANNEL's words
    "DATA_SYNC": "a data_sync value (none, before, after, both)",
    "CHANNEL_ID": "a channel like ch0",
    "SEMAPHORE_ID": "a semaphore like sem0",
    "TB_ID": "a thread block like tb0",
    "FILE": "a file name",
    "_NL": "the end of the line",
    "$END": "the end of the input",
}


class AssemblyError(PlanError):
    """A plan assembly text that does not assemble; ``path`` is ``line N`` or ``line N column M``."""

    def __init__(self, detail: str, line: int, column: int | None = None, origin: str = "") -> None:
        self.line = line
        self.column = column
        where = f"line {line}" if column is None else f"line {line} column {column}"
        super().__init__(detail, where, origin)


@functools.cache
def _parser() -> lark.Lark:
    return lark.Lark(GRAMMAR_PATH.read_text(encoding="utf-8"), parser="lalr", propagate_positions=True)


def _describe(name: str) -> str:
    if name in _DESCRIPTIONS:
        return _DESCRIPTIONS[name]
    try:
        pattern = _parser().get_terminal(name).pattern
    except KeyError:
        return name
    return f"'{pattern.value}'" if isinstance(pattern, lark.lexer.PatternStr) else name


def _expected_text(expected: set[str]) -> str:
    words = {_describe(name) for name in expected - _OP_TERMINALS} - {""}
    # What a reader most likely left out comes first; the ends of line and input come last.
    first = ["an op"] if expected & _OP_TERMINALS else []
    first += [word for word in ("'->'", "'}'") if word in words]
    last = [word for word in (_DESCRIPTIONS["_NL"], _DESCRIPTIONS["$END"]) if word in words]
    words = first + sorted(words - set(first) - set(last)) + last
    if len(words) <= 1:
        return "".join(words) or "nothing more"
    return ", ".join(words[:-1]) + " or " + words[-1]


def _got_text(error: lark.exceptions.UnexpectedInput, text: str) -> str:
    token = getattr(error, "token", None)
    if token is not None and token.type in ("$END", "_NL"):
        return _describe(token.type)
    if token is not None:
        return f"'{token}'"
    word = re.match(r"\S+", text[error.pos_in_stream :]) if error.pos_in_stream is not None else None
    return f"'{word.group()}'" if word else _describe("$END")


def _open_pipeline_line(text: str, before_line: int) -> int | None:
    """The line of the pipeline still open before a line of the text (a rough scan), if any."""
    open_lines: list[int] = []
    for number, line in enumerate(text.split("\n")[: before_line - 1], start=1):
        code = line.split("#", 1)[0].strip()
        if re.match(r"pipeline\b", code) and code.endswith("{"):
            open_lines.append(number)
        elif code == "}" and open_lines:
            open_lines.pop()
    return open_lines[-1] if open_lines else None


def _syntax_error(error: lark.exceptions.UnexpectedInput, text: str, origin: str) -> AssemblyError:
    expected = set(getattr(error, "expected", None) or getattr(error, "allowed", None) or ())
    got = _got_text(error, text)
    line, column = error.line, error.column
    token = getattr(error, "token", None)
    at_end = token is not None and token.type == "$END"
    if at_end:
        line, column = text.count("\n"), None
    # The LALR tables share the states after an op between thread blocks and pipeline bodies, so
    # the expected set holds both; keep the half that fits where the error is.
    still_open = ""
    if expected & _OP_TERMINALS:
        opened = _open_pipeline_line(text, line + 1 if at_end else line)
        expected -= _OUTSIDE_PIPELINE if opened is not None else {"RBRACE"}
        if at_end and opened is not None:
            detail = f"the pipeline opened at line {opened} has no closing '}}'"
            return AssemblyError(detail, line, None, origin)
        still_open = f" (the pipeline opened at line {opened} is still open)" if opened is not None else ""
        word = got.strip("'")
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word) and word not in _keywords():
            close = difflib.get_close_matches(word, ALL_OPS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            detail = f"unknown op '{word}'{hint}; expected {_expected_text(expected)}"
            return AssemblyError(detail, line, column, origin)
    return AssemblyError(f"expected {_expected_text(expected)}, got {got}{still_open}", line, column, origin)


@functools.cache
def _keywords() -> frozenset[str]:
    """Every word of the grammar: the op names and the literal keywords."""
    literals = {t.pattern.value for t in _parser().terminals if isinstance(t.pattern, lark.lexer.PatternStr)}
    return frozenset(literals | set(ALL_OPS))


def _string(token: lark.Token, origin: str) -> str:
    try:
        return json.loads(token, strict=False)
    except json.JSONDecodeError as error:
        raise AssemblyError(f"bad string {token}: {error.msg}", token.line, token.column, origin) from None


def _remote(refs: lark.Tree) -> bool:
    """Whether every chunk reference of one place of a chain goes through a channel (``ch3:...``)."""
    return all(ref.children[0].type == "CHANNEL_ID" for ref in refs.children)


class _Builder:
    """Walks the parse tree and builds the plan dict; records the line of every part it builds."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.lines: dict[str, int] = {}

    def fail(self, detail: str, node: lark.Tree | lark.Token) -> AssemblyError:
        meta = node if isinstance(node, lark.Token) else node.meta
        return AssemblyError(detail, meta.line, meta.column, self.origin)

    def text(self, token: lark.Token) -> str:
        return _string(token, self.origin) if token.type == "STRING" else str(token)

    # ---- header
    def header(self, tree: lark.Tree) -> dict[str, Any]:
        seen: dict[str, lark.Tree] = {}
        plan: dict[str, Any] = {}
        for setting in tree.children:
            key = setting.data
            if key in seen:
                word = "plan" if key == "plan_name" else key
                raise self.fail(f"'{word}' is set twice (first at line {seen[key].meta.line})", setting)
            seen[key] = setting
            args = setting.children
            if key == "plan_name":
                plan["name"] = self.text(args[0])
            elif key == "message_bytes":
                plan["min_message_bytes"], plan["max_message_bytes"] = int(args[0]), int(args[1])
            elif key == "metadata":
                plan["metadata"] = self.json(args[0])
            elif args[0].type == "INT":
                plan[key] = int(args[0])
            elif args[0].type == "BOOL":
                plan[key] = args[0] == "true"
            else:
                plan[key] = str(args[0])
            for field in _SETTING_FIELDS.get(key, (key,)):
                self.lines[field] = setting.meta.line
        names = {"plan" if key == "plan_name" else key for key in seen}
        missing = [key for key in _REQUIRED_SETTINGS if key not in names]
        if missing:
            detail = f"the plan header has no {', '.join(repr(key) for key in missing)} setting"
            raise AssemblyError(detail, tree.meta.line, None, self.origin)
        plan.setdefault("format_version", 1)
        return plan

    def json(self, node: lark.Tree) -> Any:
        kind = node.data
        if kind == "json_object":
            out: dict[str, Any] = {}
            for member in node.children:
                key = _string(member.children[0], self.origin)
                if key in out:
                    raise self.fail(f"metadata key {member.children[0]} appears twice", member)
                out[key] = self.json(member.children[1])
            return out
        if kind == "json_array":
            return [self.json(item) for item in node.children]
        if kind == "json_null":
            return None
        token = node.children[0]
        if kind == "json_string":
            return _string(token, self.origin)
        if kind == "json_bool":
            return token == "true"
        return json.loads(token)

    # ---- ranks
    def rank(self, tree: lark.Tree, path: str) -> dict[str, Any]:
        rank_id, inputs, outputs, scratch, *items = tree.children
        self.lines[path] = tree.meta.line
        gpu: dict[str, Any] = {
            "id": int(rank_id),
            "input_chunks": int(inputs),
            "output_chunks": int(outputs),
            "scratch_chunks": int(scratch),
            "channels": [],
            "semaphores": [],
            "threadblocks": [],
        }
        for item in items:
            if item.data == "peer_channel":
                channel_id, kind, peer = item.children
                entry = {"id": int(channel_id), "type": str(kind), "peer": int(peer)}
                field = "channels"
            elif item.data == "switch_channel":
                channel_id, ranks, buffer = item.children
                entry = {"id": int(channel_id), "type": "switch", "ranks": [int(r) for r in ranks.children]}
                entry["buffer"] = str(buffer)
                field = "channels"
            elif item.data == "semaphore":
                entry = {"id": int(item.children[0])}
                if len(item.children) > 1:
                    entry["initial_value"] = int(item.children[1])
                field = "semaphores"
            else:
                block_path = f"{path}.threadblocks[{len(gpu['threadblocks'])}]"
                entry = {"id": int(item.children[0]), "ops": self.ops(item.children[1:], f"{block_path}.ops")}
                field = "threadblocks"
            self.lines[f"{path}.{field}[{len(gpu[field])}]"] = item.meta.line
            gpu[field].append(entry)
        return gpu

    # ---- ops
    def ops(self, nodes: list[lark.Tree], path: str, in_pipeline: bool = False) -> list[dict[str, Any]]:
        out = []
        for node in nodes:
            where = f"{path}[{len(out)}]"
            self.lines[where] = node.meta.line
            out.append(self.op(node, where, in_pipeline))
        return out

    def op(self, node: lark.Tree, path: str, in_pipeline: bool) -> dict[str, Any]:
        kind = node.data
        locs = [arg for arg in node.children if isinstance(arg, lark.Tree) and arg.data == "loc"]
        args = [arg for arg in node.children if not (isinstance(arg, lark.Tree) and arg.data == "loc")]
        if kind == "pipeline":
            if in_pipeline:
                raise self.fail("a pipeline cannot nest inside another pipeline", node)
            if len(args) < 2:
                raise self.fail("a pipeline needs at least one op between its braces", node)
            if isinstance(args[0], lark.Token) and args[0].type == "UNIT":
                op = {"op": "pipeline", "unit_bytes": int(args[1])}
                args = args[1:]
            else:
                op = {"op": "pipeline", "iterations": int(args[0])}
            op["body"] = self.ops(args[1:], f"{path}.body", in_pipeline=True)
        elif kind in ("move_op", "reducing_op"):
            op = self.chain_op(node, args)
        elif kind in ("channel_sync_op", "semaphore_op"):
            op = self.id_list_op(args)
        elif kind == "barrier":
            op = {"op": "barrier", "barrier_id": int(args[0]), "threadblocks": [int(t[2:]) for t in args[1].children]}
        else:
            op = {"op": "nop"}
        for loc in locs:  # the grammar allows one
            op["loc"] = {"file": self.text(loc.children[0]), "line": int(loc.children[1])}
        return op

    def chain_op(self, node: lark.Tree, args: list) -> dict[str, Any]:
        name = str(args[0])
        shape = CHAIN_OPS[name]
        op: dict[str, Any] = {"op": name}
        if shape.reduces:
            op["reduce_op"] = str(args[1])
        chain = args[-1].children
        layouts = [stages for stages in shape.stages if len(stages) == len(chain) - 1]
        if len(layouts) > 1:  # one count, several layouts: remote chunks fill dsts, local ones dst
            stages = chain[1:]
            fitting = [s for s in layouts if all((f == "dsts") == _remote(r) for f, r in zip(s, stages, strict=True))]
            layouts = fitting or layouts
        if not layouts:
            counts = " or ".join(str(len(stages)) for stages in shape.stages)
            detail = f"'{name}' takes {counts} '->', got {len(chain) - 1}; it is written {shape.usage(name)}"
            raise self.fail(detail, node)
        self.fill(op, shape.sources_of(len(chain[0].children)), chain[0], name, shape.usage(name))
        for field, refs in zip(layouts[0], chain[1:], strict=True):
            self.fill(op, (field,), refs, name, shape.usage(name))
        return op

    def fill(self, op: dict, fields: tuple[str, ...], refs: lark.Tree, name: str, usage: str) -> None:
        """Give the references of one place of the chain to its fields: one each, a list the rest."""
        chunks = [self.chunk(ref) for ref in refs.children]
        singles = [field for field in fields if field not in LIST_FIELDS]
        wanted = len(singles) + (1 if len(singles) < len(fields) else 0)
        exact = len(singles) == len(fields)
        if len(chunks) < wanted or (exact and len(chunks) > wanted):
            amount = f"{wanted}" if exact else f"at least {wanted}"
            noun = "chunk reference" if amount == "1" else "chunk references"
            detail = f"'{name}' takes {amount} {noun} here ({', '.join(fields)}), got {len(chunks)}"
            raise self.fail(f"{detail}; it is written {usage}", refs)
        for field in fields:
            op[field] = chunks.pop(0) if field not in LIST_FIELDS else chunks

    def chunk(self, ref: lark.Tree) -> dict[str, Any]:
        tokens = list(ref.children)
        out: dict[str, Any] = {}
        if tokens[0].type == "CHANNEL_ID":
            out["channel"] = int(tokens.pop(0)[2:])
        out["buffer"] = str(tokens[0])
        out["index"] = int(tokens[1])
        if len(tokens) > 2:
            end = int(tokens[2])
            if end <= out["index"]:
                raise self.fail(f"the range {out['index']}:{end} is empty; write start:end with end > start", ref)
            out["count"] = end - out["index"]
        return out

    def id_list_op(self, args: list) -> dict[str, Any]:
        name = str(args[0])
        field, prefix, flags = ID_LIST_OPS[name]
        op: dict[str, Any] = {"op": name, field: [int(item[len(prefix) :]) for item in args[1].children]}
        for flag in args[2:]:
            key = flag.data
            if key not in flags:
                raise self.fail(f"'{name}' takes no '{key}' (it takes: {', '.join(flags)})", flag)
            if key in op:
                raise self.fail(f"'{key}' is given twice", flag)
            op[key] = True if key in ("relaxed", "publish") else str(flag.children[0])
        return op

    def plan(self, tree: lark.Tree) -> dict[str, Any]:
        header, *ranks = tree.children
        plan = self.header(header)
        plan["gpus"] = [self.rank(rank, f"gpus[{position}]") for position, rank in enumerate(ranks)]
        return plan


def _line_of(lines: dict[str, int], path: str) -> int | None:
    """The line of the longest recorded prefix of a JSON path."""
    while path:
        if path in lines:
            return lines[path]
        path = re.sub(r"(\.[^.\[]+|\[\d+\]|^[^.\[]+)$", "", path)
    return None


def assemble(text: str, origin: str = "<text>", *, check: bool = False) -> dict:
    """The plan (normalised, as ``loom.plan.canonical.normalise_plan`` leaves it) that ``text`` describes.

    Raises ``AssemblyError`` (a ``PlanError``) naming the line and what was expected. With
    ``check``, the plan is also checked against the schema and a violation is reported at the
    line that wrote the offending part, followed by its JSON path.
    """
    if not text.endswith("\n"):
        text += "\n"
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as error:
        raise _syntax_error(error, text, origin) from None
    builder = _Builder(origin)
    plan = normalise_plan(builder.plan(tree))
    if check:
        from loom.plan.schema import check_schema  # jsonschema loads only when a check is asked for

        try:
            check_schema(plan)
        except PlanError as error:
            line = _line_of(builder.lines, error.path) or tree.children[0].meta.line  # else: the header
            raise AssemblyError(f"{error.path}: {error.detail}", line, None, origin) from None
    return plan


def assemble_file(path: str | os.PathLike[str], *, check: bool = True) -> dict:
    """Assemble a UTF-8 text file; errors name the file (see ``assemble``)."""
    origin = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise InvalidArgumentError(f"cannot open plan assembly file '{path}': {error.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise AssemblyError(f"not UTF-8 at byte {error.start}", line, None, origin) from None
    return assemble(text, origin, check=check)
