# ruff: noqa: F403, F405 (star imports, as MSCCL++ programs write them)
# An MSCCL++-style DSL program (written for Loom's compatibility suite): all-to-all through the peers'
# scratch, pipelined in units of bytes. Per peer one thread block puts this rank's piece slice by slice
# and signals; another waits for each slice and copies it out; a semaphore hands over each slice.
import argparse

from mscclpp.language.channel import *
from mscclpp.language.collectives import *
from mscclpp.language.general import *
from mscclpp.language.loop import *
from mscclpp.language.program import *
from mscclpp.language.rank import *


def alltoall_pipelined(name, gpus, num_threads_per_block, min_message_size, max_message_size):
    collective = AllToAll(gpus, 1, False)
    with CollectiveProgram(
        name,
        collective,
        gpus,
        protocol="Simple",
        num_threads_per_block=num_threads_per_block,
        min_message_size=min_message_size,
        max_message_size=max_message_size,
    ):
        scratch = {gpu: Buffer(gpu, gpus) for gpu in range(gpus)}
        data = {(gpu, peer): MemoryChannel(peer, gpu) for gpu in range(gpus) for peer in range(gpus) if peer != gpu}
        ready = {(gpu, peer): MemoryChannel(peer, gpu) for gpu in range(gpus) for peer in range(gpus) if peer != gpu}
        handover = {(gpu, peer): Semaphore(gpu, initial_value=0) for gpu, peer in data}
        for (_, peer), channel in ready.items():
            channel.signal(tb=peer, relaxed=True)
            channel.wait(tb=peer, relaxed=True, data_sync=SyncType.after)
        with LoopIterationContext(unit=2**16, num_chunks=1):
            for (gpu, peer), channel in data.items():
                rank = Rank(gpu)
                channel.put(scratch[peer][gpu : gpu + 1], rank.get_input_buffer()[peer : peer + 1], tb=peer)
                channel.signal(tb=peer, data_sync=SyncType.before)
                channel.wait(tb=gpus + peer, data_sync=SyncType.after)
                handover[(gpu, peer)].release(tb=gpus + peer)
                handover[(gpu, peer)].acquire(tb=2 * gpus + peer)
                rank.copy(rank.get_output_buffer()[peer : peer + 1], scratch[gpu][peer : peer + 1], tb=2 * gpus + peer)
        for gpu in range(gpus):
            rank = Rank(gpu)
            rank.copy(rank.get_output_buffer()[gpu : gpu + 1], rank.get_input_buffer()[gpu : gpu + 1], tb=3 * gpus)
        print(JSON())


parser = argparse.ArgumentParser()
parser.add_argument("--name", type=str, help="name of the program")
parser.add_argument("--num_gpus", type=int, help="number of gpus")
parser.add_argument("--num_threads_per_block", type=int, default=1024, help="number of threads per block")
parser.add_argument("--min_message_size", type=int, default=0, help="minimum message size")
parser.add_argument("--max_message_size", type=int, default=2**64 - 1, help="maximum message size")
args = parser.parse_args()
alltoall_pipelined(args.name, args.num_gpus, args.num_threads_per_block, args.min_message_size, args.max_message_size)
