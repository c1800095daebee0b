#!/usr/bin/env bash
# race.sh BASE_URL ROUNDS: each round, eight concurrent POSTs with one fresh UUID key; prints the statuses.
base=$1
for round in $(seq 1 $2); do
    key=$(python3 -c 'import uuid; print(uuid.uuid4())')
    for i in 1 2 3 4 5 6 7 8; do
        curl -s -m 30 -o /dev/null -w '%{http_code}\n' -X POST "$base/tickets" -H 'Authorization: Bearer alice-token' \
            -H 'Content-Type: application/json' -H "Idempotency-Key: $key" -d "{\"title\":\"Race probe $round\",\"priority\":\"high\"}" &
    done | sort | uniq -c | tr -s ' \n' ' ' | sed "s/^/round $round:/"; echo
    wait
done
