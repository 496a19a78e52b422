"""An aiohttp test server's way to cut a connection as a crashed server
does: a TCP reset (RST) and no reply."""

from __future__ import annotations

import socket
import struct

from aiohttp import web


async def reset_connection(request: web.Request) -> web.StreamResponse:
    """Read the request, then reset its connection; the response returned
    is never sent."""
    await request.read()
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
    return web.Response(text="never sent")
