"""A stdio MCP server that answers requests concurrently, in any order.

    concurrent.py [--log FILE] [--pidfile FILE]

Every request is handled in its own thread; answers are written whole, one line at a time,
in the order they are ready. --log appends every received line to FILE; --pidfile writes
the pid at startup. Tools (tools/call, by params.name):

- "sleep": answers after arguments.ms with arguments.text; with params._meta.progressToken
  it sends a progress notification with that token first. A notifications/cancelled for
  its id ends it early, answered with the text "cancelled" (so a test can see which one
  was cancelled).
- "gather": waits until arguments.n gather calls are in flight at once, then all of them
  answer, the last to arrive first (out of order). After arguments.timeout_ms without
  that many it answers the error "gathered only K of N". The text is "gathered N".
- "stall": answered at once; then stdin is not read for arguments.ms (a slow reader).
- "stats": the most tools/call requests that were in flight at once so far.
"""

import json
import os
import sys
import threading
import time

import peer

out_lock = threading.Lock()
state = threading.Condition()
in_flight = 0
max_in_flight = 0
gathering = []  # ids of gather calls waiting, in arrival order
released = set()  # ids of gather calls allowed to answer
cancelled = {}  # request id (JSON text) -> Event
log_path = peer.arg("--log")


def send(obj) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
    with out_lock:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def text_result(rid, text):
    return {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}}


def gather(rid, args, reply):
    n = int(args.get("n", 2))
    end = time.monotonic() + args.get("timeout_ms", 10000) / 1000.0
    key = json.dumps(rid)
    with state:
        gathering.append(key)
        if len(gathering) >= n:
            # The last to arrive answers first: release in reverse arrival order, one by one.
            order = list(reversed(gathering[-n:]))
            del gathering[-n:]
            threading.Thread(target=release_in_order, args=(order,), daemon=True).start()
        while key not in released:
            left = end - time.monotonic()
            if left <= 0:
                k = len(gathering)
                gathering.remove(key)
                reply({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": f"gathered only {k} of {n}"}})
                return
            state.wait(left)
        released.discard(key)
        reply(text_result(rid, f"gathered {n}"))
        state.notify_all()


def release_in_order(order):
    for key in order:
        with state:
            released.add(key)
            state.notify_all()
            # Wait until that one has answered before releasing the next.
            while key in released:
                state.wait(1.0)


def handle(req):
    global in_flight, max_in_flight
    rid = req["id"]
    method = req.get("method")
    params = req.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
            "serverInfo": {"name": "tunnelgate-concurrent-peer", "version": "0"}}})
        return
    if method != "tools/call":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})
        return
    name = params.get("name")
    args = params.get("arguments") or {}
    with state:
        in_flight += 1
        max_in_flight = max(max_in_flight, in_flight)
    done = []

    def reply(obj):
        # No longer in flight before the answer leaves: the client may send the next
        # request as soon as it has it.
        global in_flight
        with state:
            in_flight -= 1
        done.append(True)
        send(obj)

    try:
        if name == "sleep":
            token = (params.get("_meta") or {}).get("progressToken")
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": 1, "total": 2,
                                 "message": str(args.get("text", ""))}})
            event = threading.Event()
            with state:
                cancelled[json.dumps(rid)] = event
            was_cancelled = event.wait(args.get("ms", 0) / 1000.0)
            with state:
                cancelled.pop(json.dumps(rid), None)
            reply(text_result(rid, "cancelled" if was_cancelled else str(args.get("text", ""))))
        elif name == "gather":
            gather(rid, args, reply)
        elif name == "stall":
            reply(text_result(rid, "stalling"))
        elif name == "stats":
            with state:
                seen = max_in_flight
            reply(text_result(rid, str(seen)))
        else:
            reply({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "unknown tool"}})
    finally:
        if not done:
            with state:
                in_flight -= 1


def main():
    pidfile = peer.arg("--pidfile")
    if pidfile:
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(pidfile + ".tmp", pidfile)
    while True:
        raw = sys.stdin.buffer.readline()
        if not raw:
            return
        peer.log_received(log_path, raw)
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if msg.get("method") == "notifications/cancelled":
            key = json.dumps((msg.get("params") or {}).get("requestId"))
            with state:
                event = cancelled.get(key)
            if event:
                event.set()
            continue
        if "method" not in msg or "id" not in msg:
            continue
        threading.Thread(target=handle, args=(msg,), daemon=True).start()
        params = msg.get("params") or {}
        if msg.get("method") == "tools/call" and params.get("name") == "stall":
            time.sleep((params.get("arguments") or {}).get("ms", 0) / 1000.0)


main()
