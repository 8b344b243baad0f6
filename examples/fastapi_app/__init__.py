"""A FastAPI application that runs its reports on readyq (docs/fastapi.md)."""
