"""Hygiene at the edges (processor/domain/text.py, outcomes.batch_id_problem, time.within_range): what intake
refuses in identifiers and free text, how a stored text is printed on a terminal, CSV cells a spreadsheet would
run, and query times that would overflow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.domain.masking import masked_record, shown_header
from processor.domain.outcomes import batch_id_problem
from processor.domain.text import csv_cell, printable, text_problem
from processor.domain.time import within_range


def test_batch_ids_with_controls_bidi_surrogates_or_the_retry_suffix_are_refused() -> None:
    assert batch_id_problem("NOV-2026") is None
    assert batch_id_problem("AUD-1.retry-1") is not None and "reserved" in str(batch_id_problem("AUD-1.retry-1"))
    assert batch_id_problem("AUD-1.retry-1", retry=True) is None
    assert batch_id_problem("AUD-1.retry-x") is None  # only the exact suffix is reserved
    for bad in ("a\x1b[2J", "two\nlines", "rtl\u202e", "x\ud800", "", "   ", "x" * 201, None, 7):
        assert batch_id_problem(bad) is not None, repr(bad)


def test_text_problem_names_the_character() -> None:
    assert text_problem("Payroll November") is None
    assert text_problem("a\u202eb") == "a control or bidi character (U+202E at position 2)"
    assert text_problem("ab\udc00") == "a lone surrogate (U+DC00 at position 3, not valid Unicode)"


@given(st.text())
def test_printable_text_holds_no_control_character_and_keeps_plain_text(text: str) -> None:
    shown = printable(text)
    assert text_problem(shown) is None
    if text_problem(text) is None:
        assert shown == text


def test_csv_cells_that_start_a_formula_are_neutralised() -> None:
    for formula in ('=HYPERLINK("http://x","y")', "+1", "-1+2", "@SUM(A1)", "\tx", "\rx"):
        assert csv_cell(formula) == "'" + formula
    assert csv_cell("E-0001") == "E-0001" and csv_cell(12) == 12 and csv_cell("a=b") == "a=b"


def test_query_times_outside_1900_to_8999_are_refused() -> None:
    assert within_range(datetime(2026, 11, 30, tzinfo=timezone(timedelta(hours=-6)))).tzinfo == UTC
    for extreme in (
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
        datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-1))),
        datetime(1899, 12, 31, tzinfo=UTC),
    ):
        with pytest.raises(ValueError, match="out of range"):
            within_range(extreme)


def test_dead_letter_records_mask_every_account_and_headers_hide_credentials() -> None:
    record = {
        "mandate_id": "m-1",
        "creditor_account": {"scheme_name": "UK.OBIE.SortCodeAccountNumber", "identification": "12345612345678"},
        "transactions": [{"destination_account": {"account_number": "200100300", "email": "a@example.com"}}],
        "origin_account": {"account_number": "100200300"},
        "debtor_account": "GB29NWBK60161331926819",
    }
    shown = masked_record(record)
    assert shown["creditor_account"] == {"scheme_name": "UK.OBIE.SortCodeAccountNumber", "identification": "****5678"}
    assert shown["transactions"][0]["destination_account"] == {"account_number": "****0300", "email": "a@example.com"}
    assert shown["origin_account"]["account_number"] == "****0300" and shown["debtor_account"] == "****6819"
    assert shown_header("authorization", "Bearer abc") == "[redacted]"
    assert shown_header("X-Api-Key", "k") == "[redacted]" and shown_header("x-forwarded", "Basic eA==") == "[redacted]"
    assert shown_header("dispersion-replayed-by", "ana") == "ana"
