"""The callback API and the approval link against hostile or careless input, over real HTTP on loopback with
the sandbox bank: nested JSON far deeper than a parser goes, HEAD requests (link scanners) and a fuzz of query
strings, bodies and paths. None gets a 5xx; HEAD runs no side effect.
"""

from __future__ import annotations

import asyncio
import string

import httpx
from engine_support import CALLBACK_PATH, batch, engine_rig
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.domain.file_states import FlowState
from processor.store import Store


async def test_deeply_nested_json_is_a_400(store: Store) -> None:
    async with engine_rig(store) as rig:
        body = "[" * 30_000 + "]" * 30_000
        answer = await rig.http.post(
            rig.public_url + CALLBACK_PATH, content=body, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "invalid_request"
        nested = '{"redirect_url": ' + "[" * 30_000 + "]" * 30_000 + "}"
        answer = await rig.http.post(
            rig.public_url + CALLBACK_PATH, content=nested, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 400, answer.text


async def test_head_runs_no_side_effect(store: Store) -> None:
    async with engine_rig(store) as rig:
        document = batch()
        batch_id = str(document["batch_id"])
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        link = rig.approval_url(batch_id)
        pars_before = len(rig.sent.to("/par", "POST"))
        head = await rig.http.head(link)
        assert head.status_code == 405 and head.headers["allow"] == "GET"
        assert len(rig.sent.to("/par", "POST")) == pars_before  # no PAR pushed
        # A real redirect, HEAD first (a scanner), then the browser: the state is still usable.
        approval = await rig.approve(link, deliver=False)
        assert (await rig.http.head(approval.redirect)).status_code == 405
        delivered = await rig.http.get(approval.redirect)
        assert delivered.status_code == 200, delivered.text
        flow = await rig.to_state(batch_id, FlowState.COMPLETED, FlowState.FAILED)
        assert flow.state == FlowState.COMPLETED


_TEXT = st.text(alphabet=string.printable + "é€\u202e\x00", max_size=40)
_PARAMS = st.dictionaries(st.sampled_from(["code", "state", "iss", "error", "t", "x", "code "]), _TEXT, max_size=4)


async def test_fuzzed_requests_never_get_a_5xx(store: Store) -> None:
    async with engine_rig(store) as rig:
        document = batch()
        batch_id = str(document["batch_id"])
        await rig.submit(document)
        await rig.to_state(batch_id, FlowState.AWAITING_AUTHORIZATION)
        link = rig.approval_url(batch_id)
        base = rig.public_url
        seen: list[int] = []

        @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(
            params=_PARAMS,
            body=st.one_of(
                st.binary(max_size=200),
                st.builds(lambda v: f'{{"redirect_url": {v}}}'.encode(), st.sampled_from(['"x"', "1", "null", "[]"])),
                st.builds(lambda q: f'{{"redirect_url": "{base}{CALLBACK_PATH}?{q}"}}'.encode(), _TEXT),
            ),
            path=st.sampled_from(
                [CALLBACK_PATH, "/approve/file/" + batch_id, "/approve/vrp/x", "/approve/file/../../etc", "/approve/"]
            ),
            method=st.sampled_from(["GET", "POST", "HEAD"]),
        )
        def fuzz(params: dict[str, str], body: bytes, path: str, method: str) -> None:
            with httpx.Client(timeout=10) as client:
                answer = client.request(
                    method,
                    base + path,
                    params=params,
                    content=body if method == "POST" else None,
                    headers={"content-type": "application/json"},
                )
            seen.append(answer.status_code)
            assert answer.status_code < 500, (method, path, params, body, answer.text)

        await asyncio.to_thread(fuzz)
        assert len(seen) >= 100
        # The real link still works after all that.
        approval = await rig.approve(link)
        assert approval.callback is not None and approval.callback.status_code == 200
