"""The jobs queue, send side: what `squall submit` and `squall serve` put on it (SQS)."""

from __future__ import annotations

from typing import Any

from squall.adapters.aws import errors


class JobsQueue:
    def __init__(self, client: Any, url: str) -> None:
        self._client = client
        self._url = url

    def send(self, body: str) -> str:
        """Send one message; its SQS message id (the submit function reads it as the request's id).

        SQS refuses a body over the queue's maximum message size (InvalidParameterValue):
        PermanentError, with SQS's words.
        """
        response = errors.call(
            "send to the jobs queue", self._client.send_message, QueueUrl=self._url, MessageBody=body
        )
        return str(response["MessageId"])
