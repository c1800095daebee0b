#!/usr/bin/env bash
# The hand reproductions, with curl, against one ticket service of this folder:
#   reproduce.sh BASE_URL [KEY_QUOTE] [KEY_SHAPE]
# KEY_QUOTE is '"' (the default: the key sent as an RFC 8941 sf-string, as the IETF draft says) or
# '' (a bare token). KEY_SHAPE is 'text' (the default: each probe's key is its name and the run's
# suffix, `scope-4242`) or 'uuid' (a UUID made from that text, for a middleware that takes only
# UUID keys). Each probe prints the curl command it ran and the status, replay header and body
# it got; its keys carry a run-unique suffix, so a running service with other data can be probed.
# Loopback only; every request has a time limit.
set -uo pipefail
base=${1:?usage: reproduce.sh BASE_URL [KEY_QUOTE] [KEY_SHAPE]}
case "$base" in http://127.0.0.1:*|http://localhost:*|http://\[::1\]:*) ;; *) echo "loopback only: $base" >&2; exit 2;; esac
q=${2-\"}
shape=${3:-text}
case "$shape" in text|uuid) ;; *) echo "KEY_SHAPE: text or uuid, not $shape" >&2; exit 2;; esac
run=$$
alice='Authorization: Bearer alice-token'
bob='Authorization: Bearer bob-token'
json='Content-Type: application/json'

key() { # key NAME: the probe's key; a leading '"' is kept in front of it (the malformed key)
    local name=$1 prefix=''
    if [ "${name:0:1}" = '"' ]; then prefix='"'; name=${name:1}; fi
    if [ "$shape" = uuid ]; then
        echo "$prefix$(python3 -c 'import sys, uuid; print(uuid.uuid5(uuid.NAMESPACE_URL, sys.argv[1]))' "$name-$run")"
    else
        echo "$prefix$name-$run"
    fi
}
post() { # post CALLER_HEADER KEY BODY [PATH]
    local path=${4:-/tickets}
    local key_header=() k=''
    [ -n "$2" ] && k=$(key "$2") && key_header=(-H "Idempotency-Key: $q$k$q")
    echo "\$ curl -X POST $base$path -H '$1' ${2:+-H 'Idempotency-Key: $q$k$q'} -d '$3'"
    : >/tmp/reproduce-body.$run; : >/tmp/reproduce-head.$run
    curl -s -m 10 -o /tmp/reproduce-body.$run -D /tmp/reproduce-head.$run -X POST "$base$path" \
        -H "$1" -H "$json" "${key_header[@]}" -d "$3"
    local status
    status=$(head -1 /tmp/reproduce-head.$run | tr -d '\r')
    echo "  -> ${status:-no answer (timed out)}$(grep -i '^idempotent-replayed' /tmp/reproduce-head.$run | tr -d '\r' | sed 's/^/, /')"
    echo "     $(head -c 300 /tmp/reproduce-body.$run | tr -s "\n " " ")"
}
count() { # count CALLER_HEADER NAME
    echo "  $2 now has $(curl -s -m 10 "$base/tickets" -H "$1" | grep -o '"ticket_id"' | wc -l) tickets"
}

echo "## 1. Another caller sends the first caller's key with the same body"
post "$alice" scope '{"title":"Scope probe","priority":"high"}'
post "$bob" scope '{"title":"Scope probe","priority":"high"}'
count "$bob" bob
echo
echo "## 2. The same key with a changed payload"
post "$alice" change '{"title":"Change probe","priority":"high"}'
post "$alice" change '{"title":"Change probe, edited","priority":"low"}'
echo
echo "## 3. The same payload with its fields reordered and spaced"
post "$alice" order '{"title":"Order probe","priority":"high"}'
post "$alice" order '{ "priority": "high",  "title": "Order probe" }'
echo
echo "## 4. Eight concurrent first sends of one fresh key"
before=$(curl -s -m 10 "$base/tickets" -H "$alice" | grep -o '"ticket_id"' | wc -l)
for i in 1 2 3 4 5 6 7 8; do
    curl -s -m 10 -o /tmp/reproduce-race.$run.$i -w '%{http_code}\n' -X POST "$base/tickets" -H "$alice" -H "$json" \
        -H "Idempotency-Key: $q$(key race)$q" -d '{"title":"Race probe","priority":"high"}' &
done | sort | uniq -c | sed 's/^/  statuses: /'
wait
after=$(curl -s -m 10 "$base/tickets" -H "$alice" | grep -o '"ticket_id"' | wc -l)
echo "  tickets created by the eight: $((after - before))"
echo
echo "## 5. A handler that fails, then the same request again"
post "$alice" crash '{"title":"Crash probe","priority":"crash"}'
post "$alice" crash '{"title":"Crash probe","priority":"crash"}'
post "$alice" crash '{"title":"Crash probe","priority":"high"}'
echo
echo "## 6. A validation error, then the corrected body under the same key"
post "$alice" invalid '{"title":"Invalid probe","priority":"invalid"}'
post "$alice" invalid '{"title":"Invalid probe, corrected","priority":"high"}'
echo
echo "## 7. A transient 503 (the backend recovers at once), then the same request again"
post "$alice" flaky "{\"title\":\"Flaky probe $run\",\"priority\":\"flaky\"}"
post "$alice" flaky "{\"title\":\"Flaky probe $run\",\"priority\":\"flaky\"}"
echo
echo "## 8. A completed key sent again (the plain replay)"
post "$alice" replay '{"title":"Replay probe","priority":"high"}'
post "$alice" replay '{"title":"Replay probe","priority":"high"}'
echo
echo "## 9. No key at all"
post "$alice" '' '{"title":"Unkeyed probe","priority":"high"}'
echo
echo "## 10. A ticket's key sent again to another endpoint (POST /comments)"
post "$alice" endpoint '{"title":"Endpoint probe","priority":"high"}'
post "$alice" endpoint '{"text":"A comment, not a ticket"}' /comments
echo
echo "## 11. A handler that fails after saving its ticket, then the retry without the fault"
before=$(curl -s -m 10 "$base/tickets" -H "$alice" | grep -o '"ticket_id"' | wc -l)
post "$alice" after '{"title":"After-effect probe","priority":"after-effect"}'
post "$alice" after '{"title":"After-effect probe","priority":"high"}'
after=$(curl -s -m 10 "$base/tickets" -H "$alice" | grep -o '"ticket_id"' | wc -l)
echo "  tickets created by the two: $((after - before))"
echo
echo "## 12. A client that hangs up after part of the body, then retries in full"
hostport=${base#http://}; host=${hostport%:*}; port=${hostport##*:}
body='{"title":"Hang-up probe","priority":"high"}'
echo "\$ (printf 'POST /tickets HTTP/1.1\\r\\nHost: $hostport\\r\\nAuthorization: Bearer alice-token\\r\\nContent-Type: application/json\\r\\nIdempotency-Key: ${q}$(key hangup)${q}\\r\\nContent-Length: ${#body}\\r\\n\\r\\n${body:0:20}'; sleep 1) | timeout 5 bash -c 'cat > /dev/tcp/$host/$port'"
(printf 'POST /tickets HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer alice-token\r\nContent-Type: application/json\r\nIdempotency-Key: %s\r\nContent-Length: %s\r\n\r\n%s' \
    "$hostport" "${q}$(key hangup)${q}" "${#body}" "${body:0:20}"; sleep 1) | timeout 5 bash -c "cat > /dev/tcp/$host/$port"
echo "  -> (hung up after ${#body} bytes were announced and 20 sent)"
sleep 1
post "$alice" hangup "$body"
post "$alice" hangup "$body"
echo
echo "## 13. One key written as an sf-string, then as a bare token"
post "$alice" forms '{"title":"Forms probe","priority":"high"}'
q_was=$q; if [ -n "$q" ]; then q=''; else q='"'; fi
post "$alice" forms '{"title":"Forms probe","priority":"high"}'
q=$q_was
echo
echo "## 14. A malformed key (an sf-string with no closing quote)"
q_was=$q; q=''
post "$alice" '"malformed' '{"title":"Malformed probe","priority":"high"}'
q=$q_was
rm -f /tmp/reproduce-body.$run /tmp/reproduce-head.$run /tmp/reproduce-race.$run.*
