"""The one polling helper of the tests: wait for a condition or fail saying what did not happen."""

import time


def wait_for(pred, timeout: float, what: str, interval: float = 0.05):
    """pred()'s first true value; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
