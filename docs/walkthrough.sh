#!/usr/bin/env bash
# Drive both flows of the sandbox bank by hand, with curl: flow A (funds dispersion: a file payment) and
# flow B (variable recurring payments: a sweeping mandate and domestic VRPs). Every step is one HTTP call of
# the spec (shared/spec/payment-initiation-service.md); docs/sandbox.md explains each one.
#
#   docs/walkthrough.sh BASE_URL INIT_DIR
#   docs/walkthrough.sh http://127.0.0.1:8700 ./sandbox-dev
#
# BASE_URL is the sandbox's base address (issuer and resource server); INIT_DIR is what
# `dispersion sandbox init INIT_DIR` wrote (clients.json, signing-key.pem, dispersion.toml).
# Needs curl, jq, openssl, base64 and `dispersion` (set DISPERSION="python -m processor.cli" to use another
# command). With a sandbox started with --admin the script moves the bank's clock instead of waiting for
# the processing delays. Exits non-zero at the first unexpected HTTP status.
set -euo pipefail

usage() {
  echo "usage: $0 BASE_URL INIT_DIR   (e.g. $0 http://127.0.0.1:8700 ./sandbox-dev)" >&2
  exit 2
}
[ $# -eq 2 ] || usage
BASE=${1%/}
DIR=$2
for tool in curl jq openssl base64; do
  command -v "$tool" >/dev/null 2>&1 || { echo "walkthrough: $tool is required" >&2; exit 2; }
done
[ -r "$DIR/clients.json" ] && [ -r "$DIR/signing-key.pem" ] || {
  echo "walkthrough: $DIR has no clients.json / signing-key.pem; run: dispersion sandbox init $DIR" >&2
  exit 2
}
read -r -a DISPERSION_CMD <<<"${DISPERSION:-dispersion}"
command -v "${DISPERSION_CMD[0]}" >/dev/null 2>&1 || {
  echo "walkthrough: ${DISPERSION_CMD[0]} not found (pip install -e . or set DISPERSION)" >&2
  exit 2
}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# --- the client, from the files `dispersion sandbox init` wrote -------------------------------------------
CLIENT_ID=$(jq -r '.clients[0].client_id' "$DIR/clients.json")
CLIENT_SECRET=$(jq -r '.clients[0].client_secret' "$DIR/clients.json")
KID=$(jq -r '.clients[0].kid' "$DIR/clients.json")
REDIRECT_URI=$(jq -r '.clients[0].redirect_uris[0]' "$DIR/clients.json")
# The sandbox's participant id (its --financial-id); dispersion.toml holds the default it was started with.
FINANCIAL_ID=${FINANCIAL_ID:-$(sed -n 's/^financial_id *= *"\([^"]*\)".*/\1/p' "$DIR/dispersion.toml" 2>/dev/null || true)}
FINANCIAL_ID=${FINANCIAL_ID:-0015800001041RHAAY}
CUSTOMER_IP=203.0.113.7
BASIC=$(printf '%s:%s' "$CLIENT_ID" "$CLIENT_SECRET" | base64 | tr -d '\n')
RS=$BASE/open-banking/v3.1/pisp
ASSERTION_TYPE=urn:ietf:params:oauth:client-assertion-type:jwt-bearer

# --- helpers ----------------------------------------------------------------------------------------------
step() { printf '\n== %s\n' "$*"; }
say() { printf '   %s\n' "$*"; }
fail() { printf '!! %s\n' "$*" >&2; exit 1; }
short() { printf '%s…' "${1:0:8}"; }   # tokens, codes and verifiers are secrets: never print them whole

# A random (version 4) UUID for x-fapi-interaction-id, state and jti.
uuid() { openssl rand -hex 16 | sed -E 's/(.{8})(.{4}).(.{3}).(.{3})(.{12})/\1-\2-4\3-a\4-\5/'; }

# call EXPECTED_STATUS LABEL CURL_ARGS...: run curl; the body lands in $WORK/body, headers in $WORK/headers.
call() {
  local expected=$1 label=$2 status
  shift 2
  status=$(curl -sS -o "$WORK/body" -D "$WORK/headers" -w '%{http_code}' "$@") || fail "$label: curl failed"
  if [ "$status" != "$expected" ]; then
    printf '!! %s: expected HTTP %s, got %s\n' "$label" "$expected" "$status" >&2
    head -c 2000 "$WORK/body" >&2; echo >&2
    exit 1
  fi
  say "$label -> HTTP $status"
}
body() { jq -r "$@" "$WORK/body"; }
header() { tr -d '\r' <"$WORK/headers" | grep -i "^$1:" | head -n 1 | sed 's/^[^:]*: *//'; }

# The value of one query parameter of a URL, percent-decoded.
query_param() {
  local value
  value=$(printf '%s' "${2#*\?}" | tr '&' '\n' | sed -n "s/^$1=//p" | head -n 1)
  value=${value//+/ }
  printf '%b' "${value//%/\\x}"
}

# Resource-call headers: bearer token and a fresh interaction id; fapi adds the participant and customer IP.
auth() { printf '%s\n' -H "Authorization: Bearer $1" -H "x-fapi-interaction-id: $(uuid)"; }
FAPI=(-H "x-fapi-financial-id: $FINANCIAL_ID" -H "x-fapi-customer-ip-address: $CUSTOMER_IP")
JSON=(-H 'Content-Type: application/json')

# The bank's clock: the admin clock when the sandbox runs with --admin (it may have been moved), else ours.
ADMIN=0
if [ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/__sandbox/clock")" = 200 ]; then ADMIN=1; fi
bank_now() {
  if [ "$ADMIN" = 1 ]; then curl -sS "$BASE/__sandbox/clock" | jq -r '.epoch | floor'; else date -u +%s; fi
}
utc_date() { date -u -d "@$1" "+$2" 2>/dev/null || date -u -r "$1" "+$2"; }

# Let a processing delay pass: move the bank's clock (--admin) or wait, until READ_FN no longer says Pending.
wait_until_settled() {   # wait_until_settled LABEL PENDING_STATUS read-function
  local label=$1 pending=$2 read_fn=$3 step_s=1 i status
  for i in $(seq 1 20); do
    "$read_fn"
    status=$(body .Data.Status)
    [ "$status" != "$pending" ] && return 0
    if [ "$ADMIN" = 1 ]; then
      call 200 "still $pending: advance the bank's clock ${step_s}s (POST /__sandbox/clock)" \
        "$BASE/__sandbox/clock" "${JSON[@]}" --data-binary "{\"advance_seconds\": $step_s}"
    else
      say "still $pending: waiting ${step_s}s for the sandbox's processing delay"
      sleep "$step_s"
    fi
    step_s=$(( step_s < 8 ? step_s * 2 : 8 ))
  done
  fail "$label is still $pending; was the sandbox started with a long --file-payment-delay / --vrp-delay?"
}

# E2: a client assertion (PS256 JWT) from the bank's message-signature operation: header, claims and the PEM.
# Sets CLIENT_ASSERTION. Each assertion has a new jti: the bank accepts every jti once.
assertion() {
  local now
  now=$(bank_now)
  jq -n --arg kid "$KID" --arg aud "$BASE" --arg cid "$CLIENT_ID" --arg jti "$(uuid)" \
    --argjson iat "$now" --argjson exp "$((now + 300))" --rawfile pem "$DIR/signing-key.pem" \
    '{header: {alg: "PS256", kid: $kid},
      body: {aud: $aud, exp: $exp, iat: $iat, iss: $cid, sub: $cid, jti: $jti},
      signingKeyPEM: $pem}' >"$WORK/signature-request.json"
  call 200 "E2 GET /o3/v1.0/message-signature" -X GET "$BASE/o3/v1.0/message-signature" "${JSON[@]}" \
    --data-binary @"$WORK/signature-request.json"
  CLIENT_ASSERTION=$(cat "$WORK/body")
  say "client_assertion: a JWT of ${#CLIENT_ASSERTION} characters"
}

# PKCE (S256) made with openssl: a 43-character verifier and its base64url SHA-256 challenge.
new_pkce() {
  VERIFIER=$(openssl rand -base64 32 | tr '+/' '-_' | tr -d '=\n')
  CHALLENGE=$(printf '%s' "$VERIFIER" | openssl dgst -sha256 -binary | base64 | tr '+/' '-_' | tr -d '=\n')
}

# E4, E5 and the approver: PAR, the authorization URL, the consent page, Approve. Sets CODE.
# authorize CONSENT_ID basic|assertion-only
authorize() {
  local consent=$1 mode=$2 state request_uri auth_url origin action page_request_uri location
  local -a par_auth=()
  [ "$mode" = basic ] && par_auth=(-H "Authorization: Basic $BASIC")
  new_pkce
  state=$(uuid)
  step "E4 pushed authorization request (scope payments:$consent openid, PKCE S256)"
  assertion
  call 200 "POST /par" "$PAR_ENDPOINT" ${par_auth[@]+"${par_auth[@]}"} \
    --data-urlencode "client_id=$CLIENT_ID" --data-urlencode "redirect_uri=$REDIRECT_URI" \
    --data-urlencode "scope=payments:$consent openid" -d response_type=code --data-urlencode "state=$state" \
    --data-urlencode "code_challenge=$CHALLENGE" -d code_challenge_method=S256 \
    --data-urlencode "client_assertion_type=$ASSERTION_TYPE" --data-urlencode "client_assertion=$CLIENT_ASSERTION"
  request_uri=$(body .request_uri)
  say "request_uri $request_uri, expires_in $(body .expires_in)"

  step "E5 authorization URL"
  call 200 "GET /o3/v1.0/par-auth-code-url/$consent" -G "$BASE/o3/v1.0/par-auth-code-url/$consent" \
    -H "Authorization: Basic $BASIC" --data-urlencode "request_uri=$request_uri" \
    -d response_type=code -d scope=payments
  auth_url=$(cat "$WORK/body")
  say "send the approver to: $auth_url"

  step "The approver opens the consent page and presses Approve"
  call 200 "GET consent page" "$auth_url"
  cp "$WORK/body" "$WORK/consent-page.html"
  # What the approver is agreeing to: the page's summary (<dd id="...">) as text.
  sed 's#<dt>#\n<dt>#g' "$WORK/consent-page.html" | sed -n -E 's#^<dt>([^<]*)</dt><dd[^>]*>(.*)</dd>.*#\1: \2#p' |
    sed -E 's#<[^>]*>##g; s#&amp;#\&#g; s/^/   | /' || true
  # The Approve form: its action and hidden request_uri (the button posts decision=approve).
  action=$(grep -o '<form method="post" action="[^"]*"' "$WORK/consent-page.html" | head -n 1 | sed 's/.*action="//; s/"$//')
  page_request_uri=$(grep -o 'name="request_uri" value="[^"]*"' "$WORK/consent-page.html" | head -n 1 |
    sed 's/.*value="//; s/"$//')
  [ -n "$action" ] && [ "$page_request_uri" = "$request_uri" ] || fail "the consent page has no Approve form"
  origin=$(printf '%s' "$auth_url" | sed -E 's#^(https?://[^/]+).*#\1#')
  call 303 "POST $action (decision=approve)" "$origin$action" \
    --data-urlencode "request_uri=$page_request_uri" -d decision=approve
  location=$(header location)
  say "redirected to ${location%%\?*}?code=…&state=…&iss=…"
  [ "$(query_param state "$location")" = "$state" ] || fail "the redirect's state is not ours"
  [ "$(query_param iss "$location")" = "$BASE" ] || fail "the redirect's iss is not the issuer"
  CODE=$(query_param code "$location")
  [ -n "$CODE" ] || fail "the redirect carries no code: $location"
  say "authorization code $(short "$CODE")"
}

# =========================================================================================================
echo "Sandbox walkthrough against $BASE, client $CLIENT_ID (admin clock: $([ "$ADMIN" = 1 ] && echo yes || echo no))"

step "E1 discovery (Basic)"
call 200 "GET /.well-known/openid-configuration" "$BASE/.well-known/openid-configuration" \
  -H "Authorization: Basic $BASIC" -H 'Content-Type: application/x-www-form-urlencoded'
cp "$WORK/body" "$WORK/discovery.json"
TOKEN_ENDPOINT=$(jq -r .token_endpoint "$WORK/discovery.json")
PAR_ENDPOINT=$(jq -r .pushed_authorization_request_endpoint "$WORK/discovery.json")
say "issuer $(jq -r .issuer "$WORK/discovery.json")"
say "token_endpoint $TOKEN_ENDPOINT"
say "pushed_authorization_request_endpoint $PAR_ENDPOINT"
say "code_challenge_methods_supported $(jq -c .code_challenge_methods_supported "$WORK/discovery.json") (yet PAR needs S256)"

# =========================================================================================================
printf '\n######## Flow A: funds dispersion (file payment), client authenticated with private_key_jwt\n'

step "E2 + E3 client-credentials token (private_key_jwt)"
assertion
call 200 "POST /token grand_type=client_credentials" "$TOKEN_ENDPOINT" -d grand_type=client_credentials \
  --data-urlencode 'scope=payments openid' --data-urlencode "client_assertion_type=$ASSERTION_TYPE" \
  --data-urlencode "client_assertion=$CLIENT_ASSERTION"
CC=$(body .access_token)
say "access_token $(short "$CC") expires_in $(body .expires_in) scope $(body .scope)"

step "A1 create the file payment consent"
# The file: references empty; destination ...9902 is a closed account, so that one transfer will be rejected.
cat >"$WORK/payload.json" <<'EOF'
{"data": {"transaction": [
  {"originAccount": {"accountNumber": "100200300", "accountType": "MONETARY", "currency": "GTQ"},
   "destinationAccount": {"accountNumber": "200100300", "accountType": "SAVINGS", "currency": "GTQ",
                          "email": "ana@example.com"},
   "transferInfo": {"transactionType": "THIRD_PROVIDER", "debitType": "D", "transactionAmount": 1500.50,
                    "executionType": "ONLINE", "concept": "Payroll November", "reference": ""}},
  {"originAccount": {"accountNumber": "100200300", "accountType": "MONETARY", "currency": "GTQ"},
   "destinationAccount": {"accountNumber": "200100301", "accountType": "SAVINGS", "currency": "GTQ",
                          "email": "luis@example.com"},
   "transferInfo": {"transactionType": "THIRD_PROVIDER", "debitType": "D", "transactionAmount": 980.25,
                    "executionType": "ONLINE", "concept": "Payroll November", "reference": ""}},
  {"originAccount": {"accountNumber": "100200300", "accountType": "MONETARY", "currency": "GTQ"},
   "destinationAccount": {"accountNumber": "200109902", "accountType": "SAVINGS", "currency": "GTQ",
                          "email": "eva@example.com"},
   "transferInfo": {"transactionType": "THIRD_PROVIDER", "debitType": "D", "transactionAmount": 2000.00,
                    "executionType": "ONLINE", "concept": "Payroll November", "reference": ""}}
]}}
EOF
FILE_HASH=$("${DISPERSION_CMD[@]}" sandbox file-hash "$WORK/payload.json")
say "FileHash (dispersion sandbox file-hash) $FILE_HASH"
FILE_REFERENCE="PAYROLL-$(utc_date "$(bank_now)" %Y%m%d)-$(openssl rand -hex 4)"
jq --arg hash "$FILE_HASH" --arg ref "$FILE_REFERENCE" \
  '{Data: {Initiation: {SupplementaryData: ., FileType: "UK.OBIE.PaymentInitiation.4.0", FileHash: $hash,
    FileReference: $ref, NumberOfTransactions: "3", ControlSum: 4480.75}}}' \
  "$WORK/payload.json" >"$WORK/consent-request.json"
mapfile -t H < <(auth "$CC")
call 201 "POST /file-payment-consents" "$RS/file-payment-consents" "${H[@]}" "${JSON[@]}" \
  -H "x-idempotency-key: $FILE_REFERENCE" --data-binary @"$WORK/consent-request.json"
cp "$WORK/body" "$WORK/consent.json"
CONSENT_ID=$(body .Data.ConsentId)
say "ConsentId $CONSENT_ID Status $(body .Data.Status)"

step "A2 upload the file, the consent id in every reference"
jq --arg c "$CONSENT_ID" '.data.transaction[].transferInfo.reference = $c' "$WORK/payload.json" >"$WORK/upload.json"
mapfile -t H < <(auth "$CC")
call 201 "POST /file-payment-consents/$CONSENT_ID/file" "$RS/file-payment-consents/$CONSENT_ID/file" \
  "${H[@]}" "${JSON[@]}" --data-binary @"$WORK/upload.json"
say "$(jq -c . "$WORK/body")"

authorize "$CONSENT_ID" assertion-only

step "E6 exchange the code (private_key_jwt, code_verifier)"
assertion
call 200 "POST /token grand_type=authorization_code" "$TOKEN_ENDPOINT" -d grand_type=authorization_code \
  -d scope=payments --data-urlencode "code=$CODE" --data-urlencode "redirect_uri=$REDIRECT_URI" \
  --data-urlencode "code_verifier=$VERIFIER" --data-urlencode "client_assertion_type=$ASSERTION_TYPE" \
  --data-urlencode "client_assertion=$CLIENT_ASSERTION"
AC=$(body .access_token)
say "access_token $(short "$AC") expires_in $(body .expires_in) scope $(body .scope) refresh_token $(short "$(body .refresh_token)")"

step "A3 create the file payment (authorization-code token)"
jq --arg c "$CONSENT_ID" '{Data: {ConsentId: $c, Initiation: .Data.Initiation}}' "$WORK/consent.json" \
  >"$WORK/payment-request.json"
mapfile -t H < <(auth "$AC")
call 201 "POST /file-payments" "$RS/file-payments" "${H[@]}" "${FAPI[@]}" "${JSON[@]}" \
  -H "x-idempotency-key: pay-$FILE_REFERENCE" --data-binary @"$WORK/payment-request.json"
FILE_PAYMENT_ID=$(body .Data.FilePaymentId)
say "FilePaymentId $FILE_PAYMENT_ID Status $(body .Data.Status) MultiAuthorisation $(body .Data.MultiAuthorisation.Status)"

step "A4 read the file payment until the bank has processed it"
read_file_payment() {
  mapfile -t H < <(auth "$CC")
  call 200 "GET /file-payments/$FILE_PAYMENT_ID" "$RS/file-payments/$FILE_PAYMENT_ID" "${H[@]}"
}
wait_until_settled "file payment $FILE_PAYMENT_ID" InitiationPending read_file_payment
FILE_PAYMENT_STATUS=$(body .Data.Status)
say "file payment Status $FILE_PAYMENT_STATUS at $(body .Data.StatusUpdateDateTime)"

step "Report file: which transfers settled"
mapfile -t H < <(auth "$CC")
call 200 "GET /file-payments/$FILE_PAYMENT_ID/report-file" "$RS/file-payments/$FILE_PAYMENT_ID/report-file" "${H[@]}"
body '.Data.Transactions[] | "   | #\(.Index) to \(.DestinationAccount) \(.Amount) \(.Currency): \(.Status)\(if .ReasonCode then " \(.ReasonCode) \(.Reason)" else "" end)"'
say "settled $(body .Data.Totals.Settled.Count), rejected $(body .Data.Totals.Rejected.Count)"

step "A5 read the consent"
mapfile -t H < <(auth "$CC")
call 200 "GET /file-payment-consents/$CONSENT_ID" "$RS/file-payment-consents/$CONSENT_ID" "${H[@]}" "${FAPI[@]}"
FILE_CONSENT_STATUS=$(body .Data.Status)
say "consent Status $FILE_CONSENT_STATUS"

# =========================================================================================================
printf '\n######## Flow B: variable recurring payments (sweeping), client authenticated with Basic\n'

step "E3 client-credentials token (Basic)"
call 200 "POST /token grand_type=client_credentials" "$TOKEN_ENDPOINT" -H "Authorization: Basic $BASIC" \
  -d grand_type=client_credentials --data-urlencode 'scope=payments openid'
CC=$(body .access_token)
say "access_token $(short "$CC") expires_in $(body .expires_in) scope $(body .scope)"

step "B1 create the VRP consent: at most 500.00 GBP a payment, 600.00 GBP a week, 1000.00 GBP a month"
NOW=$(bank_now)
VALID_FROM=$(utc_date "$NOW" '%Y-%m-%dT00:00:00+00:00')
VALID_TO=$(utc_date "$((NOW + 366 * 24 * 3600))" '%Y-%m-%dT00:00:00+00:00')
CREDITOR='{"SchemeName": "UK.OBIE.SortCodeAccountNumber", "Identification": "40400412345678", "Name": "Ana Savings"}'
jq -n --arg from "$VALID_FROM" --arg to "$VALID_TO" --argjson creditor "$CREDITOR" '{
  Data: {
    ControlParameters: {
      PSUAuthenticationMethods: ["UK.OBIE.SCA"], VRPType: ["UK.OBIE.VRPType.Sweeping"],
      ValidFromDateTime: $from, ValidToDateTime: $to,
      MaximumIndividualAmount: {Amount: "500.00", Currency: "GBP"},
      PeriodicLimits: [
        {Amount: "1000.00", Currency: "GBP", PeriodType: "Month", PeriodAlignment: "Calendar"},
        {Amount: "600.00", Currency: "GBP", PeriodType: "Week", PeriodAlignment: "Consent"}]},
    Initiation: {CreditorAccount: $creditor},
    RemittanceInformation: {Reference: "SWEEP-ANA", Unstructured: "VRP - CUOTAS - Dispersion"}},
  Risk: {}}' >"$WORK/vrp-consent-request.json"
mapfile -t H < <(auth "$CC")
call 201 "POST /domestic-vrp-consents" "$RS/domestic-vrp-consents" "${H[@]}" "${FAPI[@]}" "${JSON[@]}" \
  --data-binary @"$WORK/vrp-consent-request.json"
VRP_CONSENT_ID=$(body .Data.ConsentId)
say "ConsentId $VRP_CONSENT_ID Status $(body .Data.Status), valid $VALID_FROM to $VALID_TO"

authorize "$VRP_CONSENT_ID" basic

step "E6 exchange the code (Basic, code_verifier)"
call 200 "POST /token grand_type=authorization_code" "$TOKEN_ENDPOINT" -H "Authorization: Basic $BASIC" \
  -d grand_type=authorization_code -d scope=payments --data-urlencode "code=$CODE" \
  --data-urlencode "redirect_uri=$REDIRECT_URI" --data-urlencode "code_verifier=$VERIFIER"
AC=$(body .access_token)
say "access_token $(short "$AC") expires_in $(body .expires_in) scope $(body .scope)"

vrp_request() {   # vrp_request AMOUNT INSTRUCTION_ID
  jq -n --arg c "$VRP_CONSENT_ID" --arg amount "$1" --arg id "$2" --argjson creditor "$CREDITOR" '{
    Data: {
      ConsentId: $c, Initiation: {CreditorAccount: $creditor},
      PSUAuthenticationMethod: "UK.OBIE.SCA", VRPType: "UK.OBIE.VRPType.Sweeping",
      Instruction: {InstructionIdentification: $id, EndToEndIdentification: ("E2E-" + $id),
                    CreditorAccount: $creditor, InstructedAmount: {Amount: $amount, Currency: "GBP"},
                    RemittanceInformation: {Unstructured: "VRP - CUOTAS - Dispersion"}}},
    Risk: {}}'
}

step "B2 a domestic VRP within the limits: 250.00 GBP"
vrp_request 250.00 SWEEP-0001 >"$WORK/vrp-1.json"
mapfile -t H < <(auth "$AC")
call 201 "POST /domestic-vrps" "$RS/domestic-vrps" "${H[@]}" "${FAPI[@]}" "${JSON[@]}" \
  --data-binary @"$WORK/vrp-1.json"
VRP_ID=$(body .Data.DomesticVRPId)
say "DomesticVRPId $VRP_ID Status $(body .Data.Status) Charges $(body -c .Data.Charges)"

step "B2 over the limits: 500.01 GBP (more than MaximumIndividualAmount), then 400.00 GBP (650 > 600 this week)"
vrp_request 500.01 SWEEP-0002 >"$WORK/vrp-2.json"
mapfile -t H < <(auth "$AC")
call 400 "POST /domestic-vrps 500.01 GBP" "$RS/domestic-vrps" "${H[@]}" "${FAPI[@]}" "${JSON[@]}" \
  --data-binary @"$WORK/vrp-2.json"
[ "$(body .Code)" = UK.OBIE.Rules.FailsControlParameters ] || fail "expected FailsControlParameters: $(body -c .)"
say "$(body .Code) at $(body '.Errors[0].Path'): $(body .Message)"
vrp_request 400.00 SWEEP-0003 >"$WORK/vrp-3.json"
mapfile -t H < <(auth "$AC")
call 400 "POST /domestic-vrps 400.00 GBP" "$RS/domestic-vrps" "${H[@]}" "${FAPI[@]}" "${JSON[@]}" \
  --data-binary @"$WORK/vrp-3.json"
[ "$(body .Code)" = UK.OBIE.Rules.FailsControlParameters ] || fail "expected FailsControlParameters: $(body -c .)"
VRP_REFUSAL=$(body .Code)
say "$(body .Code) at $(body '.Errors[0].Path'): $(body .Message)"

step "Read the domestic VRP until it has settled"
read_vrp() {
  mapfile -t H < <(auth "$CC")
  call 200 "GET /domestic-vrps/$VRP_ID" "$RS/domestic-vrps/$VRP_ID" "${H[@]}" "${FAPI[@]}"
}
wait_until_settled "domestic VRP $VRP_ID" Pending read_vrp
VRP_STATUS=$(body .Data.Status)
say "domestic VRP Status $VRP_STATUS at $(body .Data.StatusUpdateDateTime)"

step "B3 read the VRP consent"
mapfile -t H < <(auth "$CC")
call 200 "GET /domestic-vrp-consents/$VRP_CONSENT_ID" "$RS/domestic-vrp-consents/$VRP_CONSENT_ID" "${H[@]}" "${FAPI[@]}"
VRP_CONSENT_STATUS=$(body .Data.Status)
say "VRP consent Status $VRP_CONSENT_STATUS"

# =========================================================================================================
printf '\n######## Summary\n'
say "flow A: file payment $FILE_PAYMENT_ID $FILE_PAYMENT_STATUS; consent $CONSENT_ID $FILE_CONSENT_STATUS"
say "flow B: domestic VRP $VRP_ID $VRP_STATUS; over-limit payments refused with $VRP_REFUSAL; consent $VRP_CONSENT_ID $VRP_CONSENT_STATUS"
[ "$FILE_PAYMENT_STATUS" = InitiationCompleted ] && [ "$FILE_CONSENT_STATUS" = Consumed ] &&
  [ "$VRP_STATUS" = AcceptedSettlementCompleted ] && [ "$VRP_CONSENT_STATUS" = Authorised ] ||
  fail "unexpected final statuses"
echo "walkthrough: both flows completed"
