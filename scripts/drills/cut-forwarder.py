# A loopback TCP forwarder LISTEN -> TARGET for drills, cut by a file in its working
# directory:
#   cut        refuse: every carried connection is aborted (a reset) and new ones are
#              closed at once, as a proxy whose upstream is gone does;
#   blackhole  drop silently: nothing is forwarded either way and nothing is reset or
#              closed; connections stay open and hang (bytes wait in the kernel's
#              buffers), new ones are accepted and forward nothing, as a firewall that
#              drops packets does. Removing the file heals: held bytes flow again.
import asyncio, os, sys
LISTEN, TARGET = int(sys.argv[1]), int(sys.argv[2])
conns = set()
async def unblocked():
    while os.path.exists('blackhole'):
        await asyncio.sleep(0.05)
async def pipe(r, w):
    try:
        while True:
            await unblocked()
            d = await r.read(65536)
            if not d:
                break
            await unblocked()
            w.write(d); await w.drain()
    except Exception: pass
    finally:
        try: w.close()
        except Exception: pass
async def handle(r, w):
    if os.path.exists('cut'):
        w.close(); return
    await unblocked()
    try: tr, tw = await asyncio.open_connection('127.0.0.1', TARGET)
    except Exception: w.close(); return
    conns.add(w); conns.add(tw)
    await asyncio.gather(pipe(r, tw), pipe(tr, w))
    conns.discard(w); conns.discard(tw)
async def watch():
    while True:
        if os.path.exists('cut'):
            for c in list(conns):
                try: c.transport.abort()
                except Exception: pass
        await asyncio.sleep(0.05)
async def main():
    s = await asyncio.start_server(handle, '127.0.0.1', LISTEN)
    asyncio.create_task(watch())
    await s.serve_forever()
asyncio.run(main())
