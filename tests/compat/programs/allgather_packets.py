# ruff: noqa: F403, F405 (star imports, as MSCCL++ programs write them)
# An MSCCL++-style DSL program (written for Loom's compatibility suite): all-gather with LL packets over
# memory channels. It imports mscclpp.language as MSCCL++ programs do; the suite points them at Loom.
import argparse

from mscclpp.language.channel import *
from mscclpp.language.collectives import *
from mscclpp.language.general import *
from mscclpp.language.program import *
from mscclpp.language.rank import *


def allgather_packets(name, gpus, num_threads_per_block, min_message_size, max_message_size):
    collective = AllGather(gpus, 1, False)
    with CollectiveProgram(
        name,
        collective,
        gpus,
        protocol="LL",
        num_threads_per_block=num_threads_per_block,
        use_double_scratch_buffer=True,
        min_message_size=min_message_size,
        max_message_size=max_message_size,
    ):
        scratch = [Buffer(gpu, gpus) for gpu in range(gpus)]
        for gpu in range(gpus):
            rank = Rank(gpu)
            src = rank.get_input_buffer()
            dst = rank.get_output_buffer()
            rank.copy(dst[gpu : gpu + 1], src[0:1], tb=0)
            for peer in range(gpus):
                if peer != gpu:
                    channel = MemoryChannel(peer, gpu)
                    channel.put_packets(scratch[peer][gpu : gpu + 1], src[0:1], tb=peer)
            for peer in range(gpus):
                if peer != gpu:
                    rank.unpack_packets(dst[peer : peer + 1], scratch[gpu][peer : peer + 1], tb=peer)
        print(JSON())


parser = argparse.ArgumentParser()
parser.add_argument("--name", type=str, help="name of the program")
parser.add_argument("--num_gpus", type=int, help="number of gpus")
parser.add_argument("--num_threads_per_block", type=int, default=1024, help="number of threads per block")
parser.add_argument("--min_message_size", type=int, default=0, help="minimum message size")
parser.add_argument("--max_message_size", type=int, default=2**64 - 1, help="maximum message size")
args = parser.parse_args()
allgather_packets(args.name, args.num_gpus, args.num_threads_per_block, args.min_message_size, args.max_message_size)
