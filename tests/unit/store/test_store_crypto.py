"""Encryption at rest: AES-GCM bound to where a value lives, key loading and rotation."""

from __future__ import annotations

import pytest

from processor.store.crypto import (
    DEV_KEY_TEXT,
    ENV_ALLOW_DEV_KEY,
    ENV_KEY,
    ENV_OLD_KEYS,
    Cipher,
    StoreKeyError,
    generate_key,
    load_cipher,
    parse_key,
)


def test_round_trip_and_randomised_ciphertext() -> None:
    cipher = Cipher.from_text(generate_key())
    one = cipher.encrypt("verifier-abc", "auth_attempts.code_verifier|s1")
    two = cipher.encrypt("verifier-abc", "auth_attempts.code_verifier|s1")
    assert one != two  # a fresh nonce each time
    assert "verifier-abc" not in one
    assert cipher.decrypt(one, "auth_attempts.code_verifier|s1") == "verifier-abc"


def test_a_value_moved_to_another_row_or_column_does_not_decrypt() -> None:
    cipher = Cipher.from_text(generate_key())
    sealed = cipher.encrypt("token", "consent_tokens.access_token|c1")
    with pytest.raises(StoreKeyError):
        cipher.decrypt(sealed, "consent_tokens.access_token|c2")
    with pytest.raises(StoreKeyError):
        cipher.decrypt(sealed, "consent_tokens.refresh_token|c1")


def test_tampering_and_wrong_keys_are_detected() -> None:
    cipher = Cipher.from_text(generate_key())
    sealed = cipher.encrypt("secret", "ctx")
    version, kid, body = sealed.split(".")
    flipped = body[:20] + ("A" if body[20] != "A" else "B") + body[21:]  # a byte of nonce or ciphertext
    with pytest.raises(StoreKeyError):
        cipher.decrypt(f"{version}.{kid}.{flipped}", "ctx")
    with pytest.raises(StoreKeyError, match="not configured"):
        Cipher.from_text(generate_key()).decrypt(sealed, "ctx")
    with pytest.raises(StoreKeyError, match="format"):
        cipher.decrypt("plain text", "ctx")


def test_rotation_reads_old_values_and_writes_with_the_new_key() -> None:
    old_key, new_key = generate_key(), generate_key()
    before = Cipher.from_text(old_key).encrypt("refresh", "ctx")
    rotated = Cipher.from_text(new_key, [old_key])
    assert rotated.decrypt(before, "ctx") == "refresh"
    after = rotated.encrypt("refresh", "ctx")
    assert Cipher.from_text(new_key).decrypt(after, "ctx") == "refresh"  # written with the new key
    with pytest.raises(StoreKeyError, match="not configured"):
        Cipher.from_text(old_key).decrypt(after, "ctx")


def test_keys_must_be_32_bytes_of_urlsafe_base64() -> None:
    assert len(parse_key(generate_key())) == 32
    assert len(parse_key(generate_key().rstrip("="))) == 32  # padding optional
    with pytest.raises(StoreKeyError):
        parse_key("too-short")
    with pytest.raises(StoreKeyError):
        parse_key("!!!not base64!!!")


def test_missing_key_is_a_clear_error_without_an_explicit_dev_opt_in() -> None:
    with pytest.raises(StoreKeyError, match=ENV_KEY):
        load_cipher({})
    dev = load_cipher({ENV_ALLOW_DEV_KEY: "1"})
    assert dev.insecure_dev_key
    assert load_cipher({}, allow_dev_key=True).decrypt(dev.encrypt("x", "c"), "c") == "x"
    with pytest.raises(StoreKeyError):
        load_cipher({ENV_ALLOW_DEV_KEY: "yes please"})  # only the exact opt-in counts


def test_configured_key_wins_and_old_keys_are_loaded() -> None:
    old, new = generate_key(), generate_key()
    sealed_old = Cipher.from_text(old).encrypt("v", "c")
    cipher = load_cipher({ENV_KEY: new, ENV_OLD_KEYS: f" {old} ,", ENV_ALLOW_DEV_KEY: "1"})
    assert not cipher.insecure_dev_key
    assert Cipher.from_text(new).decrypt(cipher.encrypt("w", "c"), "c") == "w"  # written with the configured key
    assert cipher.decrypt(sealed_old, "c") == "v"
    with pytest.raises(StoreKeyError, match="not configured"):
        Cipher.from_text(DEV_KEY_TEXT).decrypt(cipher.encrypt("w", "c"), "c")


def test_repr_shows_no_key_material() -> None:
    key = generate_key()
    assert key not in repr(Cipher.from_text(key))
