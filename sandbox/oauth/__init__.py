"""The authorization server's protocol logic, apart from the web framework (the authlib model).

Each endpoint is a function of plain values (the parsed form, the `Authorization` header, the query, the
bank's state) that returns an `OAuthAnswer` (status, body, headers); sandbox/routes/auth.py only parses the
request and turns the answer into a response. Nothing here imports Starlette.

- `discovery`: the discovery document (E1).
- `client_auth`: client_secret_basic and the choice of exactly one authentication method.
- `assertions`: private_key_jwt client assertions (pure verifier, single-use jti).
- `par`: pushed authorization requests (E4), the authorization URL (E5), the approver's decision.
- `grants`: the token endpoint (E3, E6, refresh), codes, grants and their revocation.
- `tokens`: access tokens (issue, and the Bearer check of the resource server).
- `signature`: the message-signature operation (E2).
"""
