"""The pages' Jinja2 environment: the templates, autoescaping on, and the filters that
turn times, JSON and counts into text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2

from readyq.listing import STATES
from readyq.model import IN_FLIGHT_STATES
from readyq.reports import ago, iso, number_text, progress_text

TEMPLATES = Path(__file__).resolve().parent / "templates"
# The saved state a job page shows, in characters of its indented JSON; the API has it all.
STATE_CHARS = 2000


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def short_pretty_json(value: Any, limit: int = STATE_CHARS) -> str:
    """``value`` as indented JSON, cut to ``limit`` characters with how long it was."""
    text = pretty_json(value)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text):,} characters; the JSON API has all of it)"


def template_environment() -> jinja2.Environment:
    """The environment every page renders in. Every value from the database is user
    data: autoescaping keeps it text."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["ago"] = ago
    env.filters["iso"] = iso
    env.filters["pretty"] = pretty_json
    env.filters["short_pretty"] = short_pretty_json
    env.filters["progress_text"] = progress_text
    env.filters["number"] = number_text
    env.globals["IN_FLIGHT"] = IN_FLIGHT_STATES
    env.globals["STATES"] = STATES
    return env
