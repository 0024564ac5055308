#!/usr/bin/env bash
# Install the Debian packages the gates and tests need, then get out of the way.
# Idempotent: on a machine where everything is installed it changes nothing.
#
#   redis-server, redis-tools  tests and the soak start private redis-servers
#   postgresql                 adapter-postgres' tests start private PostgreSQL
#                              servers (test-servers' PostgresServer: initdb into a
#                              temporary directory, run as the `postgres` user the
#                              package creates; Debian 12's server ships
#                              pg_stat_statements)
#   rabbitmq-server            `cargo xtask test` and `bench` start one private node
#                              (own ports, data directory, node name, AMQP 1.0
#                              plugin) per run
#   prometheus                 promtool (`cargo xtask deploy`) and a private
#                              Prometheus per test (tests/prometheus.rs)
#   python3, python3-venv      the check of test-servicebus by Microsoft's
#                              azure-servicebus SDK (crates/test-servicebus/tests/sdk.rs
#                              makes a venv under target/ and pip-installs the SDK)
#
# Nothing here starts, configures or needs the machine's own services: every test
# starts the servers it uses. `cargo xtask test` runs this script itself as root
# when a package is missing. apt-get update runs once, and only when a package is
# missing.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
# Debian puts RabbitMQ's tools in /usr/sbin.
export PATH="${PATH}:/usr/local/sbin:/usr/sbin:/sbin"

log() { echo "setup-services: $*"; }
die() { echo "setup-services: error: $*" >&2; exit 1; }

have() { command -v "$1" >/dev/null 2>&1; }
# Debian's python3 cannot make a venv (no ensurepip) without python3-venv.
can_venv() { python3 -c 'import venv, ensurepip' >/dev/null 2>&1; }

missing=()
have redis-server || missing+=(redis-server)
have redis-cli || missing+=(redis-tools)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || have initdb || missing+=(postgresql)
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || missing+=(rabbitmq-server)
{ have promtool && have prometheus; } || missing+=(prometheus)
have python3 || missing+=(python3)
can_venv || missing+=(python3-venv)
if ((${#missing[@]} > 0)); then
    [[ "$(id -u)" == 0 ]] || die "${missing[*]} missing: run as root (sudo bash .ci/setup-services.sh)"
    log "installing ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    log "redis-server, redis-tools, postgresql, rabbitmq-server, prometheus and python3 with venv are installed"
fi

compgen -G "/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_amqp1_0-*" >/dev/null \
    || die "rabbitmq-server has no rabbitmq_amqp1_0 plugin (RabbitMQ 3.10+ ships it)"
can_venv || die "python3 cannot make a venv after installing python3-venv; the Service Bus SDK check needs it"
log "ok: $(redis-server --version | cut -d' ' -f1-3), $(promtool --version 2>&1 | head -1 | cut -d' ' -f1-3), rabbitmq-server $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null || echo installed), $(python3 --version)"
