"""The `loom` command: a thin layer over library functions."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from loom.errors import InvalidArgumentError, LoomError
from loom.tools import demo as loom_demo  # standard library only at import time
from loom.version import __version__


def _cmd_validate(args: argparse.Namespace) -> int:
    from loom.plan.validate import validate_plan_file

    failed = 0
    for path in args.plans:
        try:
            plan = validate_plan_file(path)
        except (LoomError, OSError) as error:
            failed += 1
            print(f"INVALID {error}", file=sys.stderr)
        else:
            if not args.quiet:
                print(f"ok      {path} ({plan.collective}, {plan.world_size} ranks, {plan.protocol})")
    return 1 if failed else 0


def _cmd_info(args: argparse.Namespace) -> int:
    from loom.plan.validate import validate_plan_file
    from loom.tools.plan_info import format_plan_info, plan_info

    infos = [plan_info(validate_plan_file(path)) for path in args.plans]
    if args.json:
        print(json.dumps(infos if len(infos) > 1 else infos[0], indent=2))
    else:
        print("\n\n".join(format_plan_info(info) for info in infos))
    return 0


def _option_value(text: str) -> object:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _cmd_compile(args: argparse.Namespace) -> int:
    from loom.compiler.driver import list_algorithms
    from loom.verify import VerificationError

    if args.list:
        for entry in list_algorithms():
            print(f"{entry['name']:30} {entry['collective']:14} {entry['protocol']:7} {entry['summary']}")
        return 0
    if not args.target:
        raise InvalidArgumentError("loom compile needs an algorithm NAME or a FILE.py (see --list)")
    options: dict[str, object] = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgumentError(f"--option takes KEY=VALUE, got {item!r}")
        options[key] = _option_value(value)
    if args.inplace:
        options["inplace"] = True
    try:
        text = _compile(args, options)
    except VerificationError as error:
        print(f"loom compile: {error}\nloom compile: --no-verify writes the plan anyway", file=sys.stderr)
        return 1
    _write_output(text, args.output)
    return 0


def _compile(args: argparse.Namespace, options: dict[str, object]) -> str:
    import shlex

    from loom.compiler.driver import compile_algorithm, compile_file

    if args.target.endswith(".py"):
        return compile_file(
            args.target,
            world_size=args.world_size,
            ranks_per_node=args.ranks_per_node,
            instances=args.instances,
            argv=shlex.split(args.argv),
            verify=not args.no_verify,
            **options,
        )
    if args.world_size is None:
        raise InvalidArgumentError("--world-size is required to compile a library algorithm")
    return compile_algorithm(
        args.target,
        args.world_size,
        args.ranks_per_node,
        instances=args.instances or 1,
        verify=not args.no_verify,
        **options,
    )


def _cmd_verify(args: argparse.Namespace) -> int:
    import textwrap

    from loom.verify import format_findings, load_plan, summary, verify

    failed = 0
    for path in args.plans:
        try:
            plan = load_plan(path)
            findings = verify(plan, calls=args.calls)
        except (LoomError, OSError) as error:
            failed += 1
            print(f"INVALID {error}", file=sys.stderr)
            continue
        if findings:
            failed += 1
            print(f"FAILED  {path}: {summary(findings)}")
            print(textwrap.indent(format_findings(findings, None if args.all else 5), "  "))
        elif not args.quiet:
            shape = f"{plan['collective']}, {plan['world_size']} ranks, {plan['protocol']}"
            scope = (
                "; no postcondition: races, deadlocks, bounds and packets only" if plan["collective"] == "test" else ""
            )
            print(f"ok      {path} ({shape}; {args.calls} calls, and every later one{scope})")
    return 1 if failed else 0


def _cmd_disasm(args: argparse.Namespace) -> int:
    from loom.assembly import disassemble
    from loom.plan.schema import check_schema
    from loom.plan.validate import read_plan_json

    plan = read_plan_json(args.plan)
    check_schema(plan, args.plan)
    _write_output(disassemble(plan), args.output)
    return 0


def _cmd_asm(args: argparse.Namespace) -> int:
    from loom.assembly import assemble_file
    from loom.plan.canonical import canonical_plan_text

    _write_output(canonical_plan_text(assemble_file(args.text, check=True)), args.output)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from loom.interop import import_mscclpp_file
    from loom.verify import VerificationError

    try:
        text = import_mscclpp_file(
            args.plan, name=args.name, ranks_per_node=args.ranks_per_node, verify=not args.no_verify
        )
    except VerificationError as error:
        print(f"loom import: {error}\nloom import: --no-verify writes the plan anyway", file=sys.stderr)
        return 1
    _write_output(text, args.output)
    return 0


def _cmd_install_plans(args: argparse.Namespace) -> int:
    from pathlib import Path

    from loom.plan.cache import default_plans_dir
    from loom.runtime.install_plans import install_default_plans

    # --cache-dir names the cache root, as LOOM_CACHE_DIR does; the plans go into its `default` folder.
    target = Path(args.cache_dir) / "default" if args.cache_dir else default_plans_dir()
    installed = install_default_plans(target, force=args.force)
    print(f"installed {len(installed)} default plans in {target}")
    return 0


# `loom jit-plan` exit statuses besides 0 and 1 (an error): no library algorithm runs this shape, for any
# size, or none serves this size (libloom_nccl.so remembers the first for the collective, the second for
# the size alone).
JIT_PLAN_NO_SHAPE, JIT_PLAN_NO_SIZE = 3, 4


def _cmd_jit_plan(args: argparse.Namespace) -> int:
    from loom.compiler.jit_plans import choose, packet_pair_plan, plan_for_call

    if args.packets is not None:
        # The eager packet plan of a pair (libloom_nccl.so's send/recv rounds under LOOM_P2P_PACKET_BYTES).
        if (args.collective, args.world_size, args.ranks_per_node) != ("alltoallv", 2, 2):
            print("loom jit-plan: --packets is for alltoallv of 2 ranks on one node", file=sys.stderr)
            return JIT_PLAN_NO_SHAPE
        print(packet_pair_plan(args.packets).path)
        return 0
    shape = (args.collective, args.world_size, args.ranks_per_node)
    if choose(*shape, args.bytes) is None:
        sized = any(choose(*shape, size) for size in (0, 1 << 20, 1 << 30))
        print(
            f"loom jit-plan: no library algorithm serves {args.collective} of {args.bytes} bytes over"
            f" {args.world_size} ranks, {args.ranks_per_node} per node"
            + (" (there are plans for other sizes)" if sized else " (nor any other size)"),
            file=sys.stderr,
        )
        return JIT_PLAN_NO_SIZE if sized else JIT_PLAN_NO_SHAPE
    found = plan_for_call(
        args.collective,
        world_size=args.world_size,
        ranks_per_node=args.ranks_per_node,
        message_bytes=args.bytes,
        inplace=args.inplace,
        root=args.root,
        max_thread_blocks=args.max_thread_blocks,
    )
    print(found.path)
    return 0


def _cmd_select(args: argparse.Namespace) -> int:
    from loom.tools.select import explain, format_selection, machine_here, placement_from_options

    per_node = args.ranks_per_node or args.world_size
    placement = placement_from_options(args.host_only, per_node, args.ranks_sharing_gpu, args.resident_blocks)
    selection = explain(
        args.collective,
        args.bytes,
        world_size=args.world_size,
        ranks_per_node=per_node,
        dtype=args.dtype,
        inplace=args.inplace,
        root=args.root,
        op=args.op,
        placement=placement,
        machine=machine_here(args.host_only),
    )
    print(format_selection(selection))
    return 0 if selection.plan is not None or args.world_size == 1 else 3


def _cmd_tune(args: argparse.Namespace) -> int:
    from loom.tools.tune import COLLECTIVES, format_result, tune

    collectives = args.collectives.split(",") if args.collectives else list(COLLECTIVES)
    result = tune(
        args.world_size,
        host_only=args.host_only,
        collectives=collectives,
        max_bytes=loom_demo.parse_size(args.max_bytes),
        quick=args.quick,
        processes=True if args.processes else None,
        progress=not args.no_progress,
    )
    print(format_result(result))
    return 0


def _cmd_nccl_coverage(args: argparse.Namespace) -> int:
    from loom.runtime.nccl_coverage import format_coverage, read_coverage

    print(format_coverage(read_coverage(args.files)))
    return 0


def _cmd_nccl_path(args: argparse.Namespace) -> int:
    from loom.runtime.nccl import nccl_library_path

    print(nccl_library_path())
    return 0


def _cmd_cache_dir(args: argparse.Namespace) -> int:
    from loom.plan.cache import cache_root

    print(cache_root())
    return 0


def _write_output(text: str, path: str | None) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loom", description="Loom collective-communication tools")
    parser.add_argument("--version", action="version", version=f"loom {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check plans against the schema and the decoder's semantic checks")
    validate.add_argument("plans", nargs="+", metavar="PLAN")
    validate.add_argument("-q", "--quiet", action="store_true", help="print only failures")
    validate.set_defaults(run=_cmd_validate)

    info = sub.add_parser("info", help="summarise plans: collective, ranks, thread blocks, ops, scratch, sizes")
    info.add_argument("plans", nargs="+", metavar="PLAN")
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    info.set_defaults(run=_cmd_info)

    compile_ = sub.add_parser("compile", help="compile a library algorithm (NAME) or a DSL program (FILE.py) to a plan")
    compile_.add_argument("target", nargs="?", metavar="NAME|FILE.py")
    compile_.add_argument("--list", action="store_true", help="list the library algorithms")
    compile_.add_argument("--world-size", type=int, help="number of ranks")
    compile_.add_argument("--ranks-per-node", type=int, help="ranks per node (default: all on one node)")
    compile_.add_argument("--instances", type=int, help="copies of the program side by side (default 1)")
    compile_.add_argument("--inplace", action="store_true", help="compile the in-place variant")
    compile_.add_argument(
        "-O",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an algorithm option, e.g. iterations=8",
    )
    compile_.add_argument("--argv", default="", help="command-line arguments for a FILE.py that parses its own")
    compile_.add_argument("-o", "--output", help="write the plan here instead of to stdout")
    compile_.add_argument("--no-verify", action="store_true", help="do not run the plan verifier on the result")
    compile_.set_defaults(run=_cmd_compile)

    verify = sub.add_parser(
        "verify", help="prove plans compute their collective: postcondition, races, deadlocks, bounds, packets"
    )
    verify.add_argument("plans", nargs="+", metavar="PLAN", help="plan JSON, or plan assembly (.txt)")
    verify.add_argument(
        "--calls",
        type=int,
        default=3,
        help="consecutive calls to run with ranks running ahead (default 3, as loom compile: the third reuses ll"
        " scratch); the inductive step vouches for every later call",
    )
    verify.add_argument("--all", action="store_true", help="show every finding (default: 5 per category and rank)")
    verify.add_argument("-q", "--quiet", action="store_true", help="print only failures")
    verify.set_defaults(run=_cmd_verify)

    disasm = sub.add_parser("disasm", help="print a plan as plan assembly text (one op per line)")
    disasm.add_argument("plan", metavar="PLAN.json")
    disasm.add_argument("-o", "--output", metavar="OUT.txt", help="write the text here instead of to stdout")
    disasm.set_defaults(run=_cmd_disasm)

    asm = sub.add_parser("asm", help="assemble plan assembly text into plan JSON (schema-checked, canonical)")
    asm.add_argument("text", metavar="PLAN.txt")
    asm.add_argument("-o", "--output", metavar="OUT.json", help="write the plan here instead of to stdout")
    asm.set_defaults(run=_cmd_asm)

    import_ = sub.add_parser(
        "import", help="convert an MSCCL++ JSON execution plan into a Loom plan (schema-checked, verified)"
    )
    import_.add_argument("plan", metavar="MSCCLPP.json")
    import_.add_argument("-o", "--output", metavar="OUT.json", help="write the plan here instead of to stdout")
    import_.add_argument("--name", help="the Loom plan's name (default: the MSCCL++ plan's)")
    import_.add_argument(
        "--ranks-per-node", type=int, help="ranks per node (default: the world size; MSCCL++ plans do not say)"
    )
    import_.add_argument("--no-verify", action="store_true", help="do not run the plan verifier on the result")
    import_.set_defaults(run=_cmd_import)

    install = sub.add_parser(
        "install-plans", help="copy the bundled default plans into <cache root>/default, where the executor loads them"
    )
    install.add_argument("--force", action="store_true", help="rewrite every plan, even those already up to date")
    install.add_argument(
        "--cache-dir", metavar="DIR", help="the cache root (default: $LOOM_CACHE_DIR, else ~/.cache/loom)"
    )
    install.set_defaults(run=_cmd_install_plans)

    demo = sub.add_parser(
        "demo",
        help="compile, verify, register and run a DSL all-reduce beside NCCL on every visible GPU (else on the CPU)",
    )
    loom_demo.add_arguments(demo)
    demo.set_defaults(run=loom_demo.run)

    cache_dir = sub.add_parser("cache-dir", help="print the cache root ($LOOM_CACHE_DIR, else ~/.cache/loom)")
    cache_dir.set_defaults(run=_cmd_cache_dir)

    nccl_path = sub.add_parser(
        "nccl-path", help="print the path of libloom_nccl.so, the NCCL API over Loom (LD_PRELOAD it; docs/nccl.md)"
    )
    nccl_path.set_defaults(run=_cmd_nccl_path)

    jit_plan = sub.add_parser(
        "jit-plan",
        help="compile (once, cached) the library plan for one call of a shape with no bundled plan; print its path"
        f" (exit {JIT_PLAN_NO_SHAPE}: no algorithm runs the shape, {JIT_PLAN_NO_SIZE}: none serves the size)",
    )
    jit_plan.add_argument(
        "--collective", required=True, help="allreduce, allgather, reducescatter, alltoall, broadcast, reduce"
    )
    jit_plan.add_argument("--world-size", type=int, required=True)
    jit_plan.add_argument("--ranks-per-node", type=int, required=True)
    jit_plan.add_argument("--bytes", type=int, required=True, help="this rank's input bytes")
    jit_plan.add_argument("--inplace", action="store_true")
    jit_plan.add_argument("--root", type=int, default=None)
    jit_plan.add_argument(
        "--max-thread-blocks",
        type=int,
        default=None,
        help="the most thread blocks a rank's plan may have where it runs (fewer instances where needed)",
    )
    jit_plan.add_argument(
        "--packets",
        type=int,
        default=None,
        metavar="CAPACITY",
        help="the eager packet plan of a pair (alltoallv, 2 ranks, 1 node) for entries of up to CAPACITY bytes",
    )
    jit_plan.set_defaults(run=_cmd_jit_plan)

    select = sub.add_parser(
        "select",
        help="say which plan a call would run and why: user plan, bundled table, JIT, or passed over (exit 3: none)",
    )
    select.add_argument("--collective", required=True, help="allreduce, allgather, reducescatter, alltoall, ...")
    select.add_argument("--bytes", type=int, required=True, help="each rank's input bytes")
    select.add_argument("--world-size", type=int, required=True)
    select.add_argument("--ranks-per-node", type=int, default=None, help="default: the world size (one node)")
    select.add_argument("--dtype", default="float32")
    select.add_argument("--op", default="sum")
    select.add_argument("--root", type=int, default=None, help="broadcast and reduce (default 0)")
    select.add_argument("--inplace", action="store_true")
    select.add_argument(
        "--host-only", action="store_true", help="the CPU backend (no placement limit unless LOOM_CPU_RESIDENT_BLOCKS)"
    )
    select.add_argument(
        "--ranks-sharing-gpu", type=int, default=None, help="ranks on one GPU (with --resident-blocks; default 1)"
    )
    select.add_argument(
        "--resident-blocks", type=int, default=None, help="blocks the GPU holds at once (default: this machine's)"
    )
    select.set_defaults(run=_cmd_select)

    tune_ = sub.add_parser(
        "tune",
        help="time the candidates of every collective and size on this machine; write <cache>/tuned/<machine>.json,"
        " which the selector takes before the bundled table (LOOM_TUNED=0 ignores it)",
    )
    tune_.add_argument("--world-size", type=int, required=True)
    tune_.add_argument("--host-only", action="store_true", help="the CPU backend (ranks on threads)")
    tune_.add_argument(
        "--collectives", default=None, help="comma-separated (default allreduce,allgather,reducescatter,alltoall)"
    )
    tune_.add_argument("--max-bytes", default="1G", help="largest size per rank (1K, 4M, 1G; default 1G)")
    tune_.add_argument("--quick", action="store_true", help="fewer sizes (powers of 16), instances and rounds")
    tune_.add_argument("--processes", action="store_true", help="ranks as processes (default: with a GPU per rank)")
    tune_.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    tune_.set_defaults(run=_cmd_tune)

    coverage = sub.add_parser(
        "nccl-coverage",
        help="sum the LOOM_NCCL_STATS files of a job run under libloom_nccl.so: what Loom ran and what went to NCCL",
    )
    coverage.add_argument("files", nargs="+", metavar="FILE")
    coverage.set_defaults(run=_cmd_nccl_coverage)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (LoomError, OSError) as error:
        print(f"loom {args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
