"""The gRPC server: grpc.aio on an event loop of its own thread, plain RPCs on a worker pool.

grpcio's synchronous server holds a worker thread for each RPC's whole life, so every
connected client's Telemetry stream took one for as long as it stayed connected, and idle
streams of one user could take them all. grpc.aio runs the Telemetry coroutine
(telemetry.py) on the loop, and every other RPC, written as plain functions, on the
--grpc-threads pool (its migration_thread_pool), exactly as the synchronous server would.
At most (stream cap + --grpc-threads) RPCs are admitted at once (maximum_concurrent_rpcs):
past that gRPC answers RESOURCE_EXHAUSTED at once rather than queueing the call.
"""

import asyncio
import threading
from concurrent import futures

import grpc
from rocketmq.grpc_protocol.service_pb2_grpc import add_MessagingServiceServicer_to_server

START_TIMEOUT_S = 30.0


class GrpcServer:
    def __init__(self, servicer, config):
        self.pool = futures.ThreadPoolExecutor(config.grpc_threads, thread_name_prefix="grpc")
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="grpc-loop", daemon=True)
        self._thread.start()
        self.server = None
        self.port = self._run(self._bind(servicer, config))

    def _run(self, coro, timeout: float = START_TIMEOUT_S):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _bind(self, servicer, config) -> int:
        self.server = grpc.aio.server(
            self.pool, maximum_concurrent_rpcs=config.max_streams + config.grpc_threads,
            options=[("grpc.max_receive_message_length", config.max_body_bytes + (1 << 20)),
                     ("grpc.so_reuseport", 0)])
        add_MessagingServiceServicer_to_server(servicer, self.server)
        return self.server.add_insecure_port(config.grpc_listen)

    def start(self) -> None:
        self._run(self.server.start())

    def stop(self, grace: float = 1.0) -> None:
        try:
            self._run(self.server.stop(grace), grace + 5)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
            self.pool.shutdown(wait=False, cancel_futures=True)
