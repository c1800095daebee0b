#!/bin/sh
# Starts nginx (from the system, e.g. Debian's nginx-light) in the foreground as a reverse proxy
# on 127.0.0.1:PORT in front of UPSTREAM, with nginx.conf.in filled in, its pid and temp files in
# DIR (the check's {{dir}}, removed after the run).
#   run.sh PORT UPSTREAM DIR
set -eu
port=$1
upstream=$2
dir=$3/nginx
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
sed -e "s#@PORT@#$port#g" -e "s#@UPSTREAM@#$upstream#g" -e "s#@DIR@#$dir#g" \
    "$here/nginx.conf.in" > "$dir/nginx.conf"
nginx=$(command -v nginx || echo /usr/sbin/nginx)
exec "$nginx" -p "$dir" -c "$dir/nginx.conf" -e stderr
