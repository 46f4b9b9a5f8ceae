# ruff: noqa: F403, F405 (star imports, as MSCCL++ programs write them)
# An MSCCL++-style DSL program (written for Loom's compatibility suite): all-gather with puts over memory
# channels, a relaxed handshake before and a signal/wait after.
import argparse

from mscclpp.language.channel import *
from mscclpp.language.collectives import *
from mscclpp.language.general import *
from mscclpp.language.program import *
from mscclpp.language.rank import *


def allgather_put_signal(name, gpus, num_threads_per_block, min_message_size, max_message_size):
    collective = AllGather(gpus, 1, True)
    with CollectiveProgram(
        name,
        collective,
        gpus,
        protocol="Simple",
        num_threads_per_block=num_threads_per_block,
        min_message_size=min_message_size,
        max_message_size=max_message_size,
    ):
        for gpu in range(gpus):
            for peer in range(gpus):
                if peer == gpu:
                    continue
                channel = MemoryChannel(peer, gpu)
                channel.signal(tb=peer, relaxed=True)
                channel.wait(tb=peer, relaxed=True, data_sync=SyncType.after)
                mine = Rank(gpu).get_output_buffer()[gpu : gpu + 1]
                theirs = Rank(peer).get_output_buffer()[gpu : gpu + 1]
                channel.put(theirs, mine, tb=peer)
                channel.signal(tb=peer, data_sync=SyncType.before)
                channel.wait(tb=peer, data_sync=SyncType.after)
        print(JSON())


parser = argparse.ArgumentParser()
parser.add_argument("--name", type=str, help="name of the program")
parser.add_argument("--num_gpus", type=int, help="number of gpus")
parser.add_argument("--num_threads_per_block", type=int, default=1024, help="number of threads per block")
parser.add_argument("--min_message_size", type=int, default=0, help="minimum message size")
parser.add_argument("--max_message_size", type=int, default=2**64 - 1, help="maximum message size")
args = parser.parse_args()
allgather_put_signal(args.name, args.num_gpus, args.num_threads_per_block, args.min_message_size, args.max_message_size)
