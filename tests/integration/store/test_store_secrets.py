"""Authorization attempts and consent tokens: encrypted at rest, single-use states."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from store_fixtures import T0, StoreTarget, at

from processor.store import (
    Cipher,
    ConstraintError,
    ConsumeOutcome,
    Store,
    StoreKeyError,
    VersionConflictError,
    generate_key,
)

VERIFIER = "pkce-verifier-" + "v" * 60
ACCESS = "access-token-0123456789abcdef"
REFRESH = "refresh-token-fedcba9876543210"


def _attempt(store: Store, *, state: str | None = None, expires_in: int = 600) -> str:
    with store.transaction() as tx:
        attempt = tx.auth.create(
            flow_kind="file",
            flow_id="b-1",
            consent_id="pay-fi-1",
            integration="bank",
            code_verifier=VERIFIER,
            now=T0,
            expires_at=T0 + timedelta(seconds=expires_in),
            state=state,
        )
    return attempt.state


def test_a_state_is_used_once(store: Store) -> None:
    state = _attempt(store)
    assert len(state) >= 43
    with store.transaction() as tx:
        first = tx.auth.consume(state, now=at(10))
        second = tx.auth.consume(state, now=at(11))
        unknown = tx.auth.consume("x" * 43, now=at(11))
    assert first.ok and first.attempt is not None
    assert first.attempt.code_verifier == VERIFIER and first.attempt.consent_id == "pay-fi-1"
    assert first.attempt.used_at == at(10)
    assert second.outcome is ConsumeOutcome.USED and not second.ok
    assert unknown.outcome is ConsumeOutcome.UNKNOWN and unknown.attempt is None


def test_an_expired_state_is_refused(store: Store) -> None:
    state = _attempt(store, expires_in=300)
    with store.transaction() as tx:
        late = tx.auth.consume(state, now=at(300))
        assert late.outcome is ConsumeOutcome.EXPIRED
        stored = tx.auth.get(state)
        assert stored is not None and stored.used_at is None


def test_states_must_be_long_and_unique(store: Store) -> None:
    with pytest.raises(ValueError, match="128"):
        _attempt(store, state="short-guid")
    _attempt(store, state="s" * 22)
    with pytest.raises(ConstraintError):
        _attempt(store, state="s" * 22)
    with store.transaction(write=False) as tx:
        assert [a.state for a in tx.auth.for_flow("file", "b-1")] == ["s" * 22]


def test_concurrent_redirects_consume_a_state_exactly_once(store_target: StoreTarget, store_cipher: Cipher) -> None:
    with store_target.open(store_cipher) as store:
        state = _attempt(store)
    outcomes: list[ConsumeOutcome] = []
    errors: list[BaseException] = []
    start = threading.Barrier(5)

    def deliver() -> None:
        try:
            with store_target.open(store_cipher, migrate=False, pool_size=1) as mine:
                start.wait()
                with mine.transaction() as tx:
                    outcomes.append(tx.auth.consume(state, now=at(5)).outcome)
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=deliver) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(outcomes) == sorted([ConsumeOutcome.OK] + [ConsumeOutcome.USED] * 4)


def test_secrets_are_not_readable_in_the_raw_tables(store: Store) -> None:
    state = _attempt(store)
    with store.transaction() as tx:
        tx.tokens.save(
            "pay-fi-1", integration="bank", access_token=ACCESS, refresh_token=REFRESH, expires_at=at(432000), now=T0
        )
    with store.transaction(write=False) as tx:
        attempts = tx.raw.fetchall("SELECT * FROM auth_attempts")
        tokens = tx.raw.fetchall("SELECT * FROM consent_tokens")
    dumped = repr(attempts) + repr(tokens)
    for secret in (VERIFIER, ACCESS, REFRESH, "pkce-verifier", "access-token", "refresh-token"):
        assert secret not in dumped
    assert str(attempts[0]["code_verifier_enc"]).startswith("v1.")
    assert state in dumped  # the state itself is a lookup key, not a secret at rest


def test_tokens_round_trip_and_refresh_with_compare_and_set(store: Store) -> None:
    with store.transaction() as tx:
        saved = tx.tokens.save(
            "vrp-1",
            integration="bank",
            access_token=ACCESS,
            refresh_token=REFRESH,
            expires_at=at(600),
            now=T0,
            scope="payments:vrp-1 openid",
        )
    assert ACCESS not in repr(saved) and REFRESH not in repr(saved)
    assert saved.expires_within(at(590), 30) and not saved.expires_within(at(100), 30)
    with store.transaction() as tx:
        refreshed = tx.tokens.replace(saved, access_token="access-2", expires_at=at(1200), now=at(580))
    assert (refreshed.access_token, refreshed.refresh_token) == ("access-2", REFRESH)  # refresh token kept
    assert refreshed.version == saved.version + 1
    with store.transaction() as tx, pytest.raises(VersionConflictError):
        tx.tokens.replace(saved, access_token="access-3", expires_at=at(1300), now=at(581))  # a slower instance
    with store.transaction(write=False) as tx:
        current = tx.tokens.get("vrp-1")
    assert current is not None and current.access_token == "access-2" and current.scope == "payments:vrp-1 openid"
    with store.transaction() as tx:
        assert tx.tokens.delete("vrp-1")
        assert tx.tokens.get("vrp-1") is None


def test_the_wrong_key_cannot_read_and_ciphertexts_cannot_be_swapped(store_target: StoreTarget, store: Store) -> None:
    with store.transaction() as tx:
        tx.tokens.save("c-1", integration="bank", access_token="one", expires_at=at(600), now=T0)
        tx.tokens.save("c-2", integration="bank", access_token="two", expires_at=at(600), now=T0)
    with (
        store_target.open(Cipher.from_text(generate_key()), migrate=False) as other,
        other.transaction() as tx,
        pytest.raises(StoreKeyError),
    ):
        tx.tokens.get("c-1")
    with store.transaction() as tx:
        sealed = tx.raw.scalar("SELECT access_token_enc FROM consent_tokens WHERE consent_id = ?", ("c-1",))
        tx.raw.execute("UPDATE consent_tokens SET access_token_enc = ? WHERE consent_id = ?", (sealed, "c-2"))
        with pytest.raises(StoreKeyError):
            tx.tokens.get("c-2")


def test_a_store_without_a_key_refuses_secret_repositories(store_target: StoreTarget, store: Store) -> None:
    with store_target.open(None, migrate=False) as keyless, keyless.transaction() as tx:
        assert tx.flows.get("b-1") is None  # everything else works
        with pytest.raises(StoreKeyError, match="without an encryption key"):
            _ = tx.auth
        with pytest.raises(StoreKeyError):
            _ = tx.tokens
