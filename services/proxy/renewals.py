"""Auto-renewal of the invisible time of PushConsumer deliveries (ReceiveMessage with auto_renew).

RocketMQ 5's PushConsumer receives with auto_renew and names no invisible duration: the
proxy keeps each delivered message invisible while the client's listener runs, and the
client then acks (or, on a failed consume, changes the invisible time of) the handle it was
given. So this proxy keeps, per handle it delivered that way, the latest handle its renewals
made: `RENEW_AHEAD_MS` before a deadline the delivery is extended by --default-invisible-ms,
and an ack, change or forward through this proxy acts on the latest handle and ends the
renewal. Renewal stops after --renew-max-ms (the message then comes back to the group like
any unacked one), when the client terminates, or when the broker says the delivery is gone
(acked through another proxy, expired). A restarted proxy has forgotten them: those messages
come back after their invisible time, as RocketMQ's proxy's do.

`Renewals` holds no socket: `change(group, handle, invisible_ms) -> new handle` is the
backend's broker call, made by `renew_due` on the caller's thread (app.py's renewal thread).
"""

import logging
import threading
import time
from dataclasses import dataclass

from quiver.errors import QuiverError
from quiver.wire.receipt_handle import ReceiptHandle

log = logging.getLogger(__name__)

RENEW_AHEAD_MS = 10_000   # renew when this little invisible time is left (RocketMQ's proxy: 10 s)
MAX_TRACKED = 100_000     # deliveries renewed at once; beyond, new ones are not renewed (logged)


@dataclass
class _Delivery:
    client_id: str
    group: str
    current: ReceiptHandle
    until_ms: int          # no renewal after this (received + --renew-max-ms)


class Renewals:
    def __init__(self, change, invisible_ms: int, max_ms: int):
        self._change = change
        self.invisible_ms = invisible_ms
        self.max_ms = max_ms
        self._held: dict[str, _Delivery] = {}     # the handle the client holds -> its delivery
        self._lock = threading.Lock()
        self._renewing = threading.Lock()         # one broker change at a time, never under a take()
        self.renewed = 0                          # renewals made (STATUS, metrics)
        self._full_logged = False

    def __len__(self) -> int:
        return len(self._held)

    def track(self, client_id: str, group: str, handles: list[ReceiptHandle], now_ms: int | None = None) -> None:
        """Keep these deliveries invisible until acked (auto_renew receive)."""
        until = (now_ms or _now_ms()) + self.max_ms
        with self._lock:
            for h in handles:
                if len(self._held) >= MAX_TRACKED:
                    if not self._full_logged:
                        log.warning("%d deliveries are being renewed: new ones are not (they come back after "
                                    "their invisible time unless acked)", MAX_TRACKED)
                        self._full_logged = True
                    return
                self._held[h.encode()] = _Delivery(client_id, group, h, until)

    def take(self, held: str) -> str:
        """The handle to act on for the handle a client holds (itself when not renewed here), ending
        its renewal; waits for a renewal of it under way, whose handle would replace the one taken."""
        with self._renewing, self._lock:
            d = self._held.pop(held, None)
        return held if d is None else d.current.encode()

    def end(self, held: str) -> None:
        with self._lock:
            self._held.pop(held, None)

    def drop_client(self, client_id: str) -> int:
        """Stop renewing what `client_id` holds (it terminated); how many were dropped."""
        with self._lock:
            gone = [k for k, d in self._held.items() if d.client_id == client_id]
            for k in gone:
                del self._held[k]
        return len(gone)

    def renew_due(self, now_ms: int | None = None) -> int:
        """One round: extend every delivery within RENEW_AHEAD_MS of its deadline; a delivery past
        --renew-max-ms or one the broker no longer has in flight is dropped. Returns renewals made;
        one failing delivery does not stop the others."""
        now = now_ms or _now_ms()
        with self._lock:
            due = [(k, d) for k, d in self._held.items() if d.current.deadline_ms - now <= RENEW_AHEAD_MS]
        made = 0
        for held, d in due:
            if now >= d.until_ms:
                self.end(held)
                continue
            with self._renewing:
                if held not in self._held:      # taken (acked) meanwhile
                    continue
                try:
                    d.current = self._change(d.group, d.current, self.invisible_ms)
                    made += 1
                except QuiverError as exc:     # acked elsewhere, expired, broker gone: nothing left to keep
                    log.info("renewal of %s ends: %s", held, exc)
                    self.end(held)
                except Exception:
                    log.exception("renewal of %s failed", held)
                    self.end(held)
        self.renewed += made
        return made


def _now_ms() -> int:
    return int(time.time() * 1000)
