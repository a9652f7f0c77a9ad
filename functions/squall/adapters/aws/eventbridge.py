"""EventBridge adapter: scale-check requests as custom events on the Squall bus."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from squall.adapters.aws.errors import translated
from squall.core.errors import RetryableError

SOURCE = "squall.core.jobs"
SCALE_CHECK_REQUESTED = "Scale Check Requested"
MAX_JOB_IDS = 50  # keep the event far below EventBridge's 256 KB entry limit


class EventBridgeScaleRequests:
    def __init__(self, client: Any, *, bus_name: str) -> None:
        self._client = client
        self._bus = bus_name

    def request_scale_check(self, *, reason: str, job_ids: Sequence[str] = ()) -> None:
        detail = {"reason": reason, "jobIds": list(job_ids)[:MAX_JOB_IDS], "jobCount": len(job_ids)}
        entry = {
            "Source": SOURCE,
            "DetailType": SCALE_CHECK_REQUESTED,
            "Detail": json.dumps(detail),
            "EventBusName": self._bus,
        }
        with translated("request scale check"):
            response = self._client.put_events(Entries=[entry])
        if response.get("FailedEntryCount"):
            code = response["Entries"][0].get("ErrorCode", "unknown")
            raise RetryableError(f"request scale check: {code}")
