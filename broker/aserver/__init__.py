"""The node's own HTTP/1.1 server: asyncio on uvloop with llhttp (httptools) parsing, one loop thread.

``server`` (the cap, timeouts, drain), ``protocol`` (a connection, its requests in order),
``request`` (a parsed request and its WSGI environ), ``wsgi`` (the app on worker threads, answers
streamed with back-pressure), ``framing`` (what the server refuses itself, as JSON).
"""

from .server import FD_RESERVE, InlineHandler, Respond, Server, ensure_fd_limit

__all__ = ["FD_RESERVE", "InlineHandler", "Respond", "Server", "ensure_fd_limit"]
