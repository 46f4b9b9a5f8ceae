# ruff: noqa: F403, F405 (star imports, as MSCCL++ programs write them)
# An MSCCL++-style unit test of one op (written for Loom's compatibility suite): TestCollective, one rank,
# one copy; its plan has no postcondition, so the verifier checks races, deadlocks, bounds and packets.
import argparse

from mscclpp.language.channel import *
from mscclpp.language.collectives import *
from mscclpp.language.general import *
from mscclpp.language.program import *
from mscclpp.language.rank import *


def copy_unit_test(num_threads_per_block, min_message_size, max_message_size):
    with CollectiveProgram(
        "copy_unit_test",
        TestCollective(1, 2, 2),
        1,
        protocol="Simple",
        num_threads_per_block=num_threads_per_block,
        min_message_size=min_message_size,
        max_message_size=max_message_size,
    ):
        rank = Rank(0)
        rank.copy(rank.get_output_buffer()[0:2], rank.get_input_buffer()[0:2], tb=0)
        print(JSON())


parser = argparse.ArgumentParser()
parser.add_argument("--num_threads_per_block", type=int, default=1024, help="number of threads per block")
parser.add_argument("--min_message_size", type=int, default=0, help="minimum message size")
parser.add_argument("--max_message_size", type=int, default=2**64 - 1, help="maximum message size")
args = parser.parse_args()
copy_unit_test(args.num_threads_per_block, args.min_message_size, args.max_message_size)
