"""The submitter lookup reads a principal by the one grammar, ASCII and whole."""

from __future__ import annotations

from typing import Any

import pytest

from squall.adapters.aws.identity import IamPrincipals
from squall.core.errors import PermanentError


class _NoIam:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"IAM was asked ({name}) for a principal that is no principal")


@pytest.mark.parametrize(
    "principal",
    [
        "AROAABCDEFGHIJKLMNOP\n",  # a trailing newline: no sender's id ever ends so
        "arn:aws:iam::123456789012:role/trainer\n",
        "arn:aws:iam::١٢٣٤٥٦٧٨٩٠١٢:role/trainer",  # Arabic-Indic digits
        "arn:aws:iam::123456789012:role/tráiner",  # \\w took any letter
    ],
)
def test_a_principal_off_the_grammar_is_refused_without_asking_iam(principal: str) -> None:
    with pytest.raises(PermanentError, match="is not an IAM role or user ARN"):
        IamPrincipals(_NoIam()).unique_id(principal)


def test_a_unique_id_is_taken_as_it_is() -> None:
    assert IamPrincipals(_NoIam()).unique_id("AROAABCDEFGHIJKLMNOP") == "AROAABCDEFGHIJKLMNOP"
