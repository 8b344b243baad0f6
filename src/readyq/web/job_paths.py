"""A job id in a URL path: the ``readyq_job_id`` convertor the routes' paths use, and the
id a request names."""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request

from readyq.errors import JobNotFound
from readyq.schema import MAX_ID


class JobIdConvertor(Convertor[int]):
    """A job id in a path: at most 19 digits, as the largest id has. A longer number is
    no job (and Python refuses to read one of a few thousand digits): no route matches
    it, so it is a 404 rather than an error."""

    regex = "[0-9]{1,19}"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(value)


# Registered on import, before any route whose path names it is built.
register_url_convertor("readyq_job_id", JobIdConvertor())


def job_id_of(request: Request) -> int:
    """The job id in the request's path; JobNotFound when no job can have it."""
    job_id = int(request.path_params["job_id"])
    if job_id <= 0 or job_id > MAX_ID:
        raise JobNotFound(f"no job with id {job_id}")
    return job_id
