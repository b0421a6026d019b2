"""The HTTP API of a host: `http_app` (the ASGI application), `HttpServer` (it served by uvicorn).

See `app.py` for the routes, `feed.py` for the event streams, `problems.py`
for the errors, `serve.py` for starting and stopping.
"""
