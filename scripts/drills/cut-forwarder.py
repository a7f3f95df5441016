import asyncio, os, sys
LISTEN, TARGET = int(sys.argv[1]), int(sys.argv[2])
conns = set()
async def pipe(r, w):
    try:
        while d := await r.read(65536):
            w.write(d); await w.drain()
    except Exception: pass
    finally:
        try: w.close()
        except Exception: pass
async def handle(r, w):
    if os.path.exists('cut'):
        w.close(); return
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
