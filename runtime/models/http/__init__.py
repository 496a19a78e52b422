"""The model backends' HTTP client: httpx on an aiohttp transport, and
server-sent events.
"""
