#!/usr/bin/env bash
# Make sure the services the tests need are installed and running, then get out of
# the way. Idempotent: on a machine where everything is up it changes nothing.
#
#   redis-server, redis-tools  installed (the `test` gate starts its own private
#                              redis-server per run; the shared 6379 is not used)
#   rabbitmq-server            installed, running, plugin rabbitmq_amqp1_0 enabled,
#                              answering on 127.0.0.1:5672 (guest/guest)
#   python3, python3-venv      for the check of test-servicebus by Microsoft's
#                              azure-servicebus SDK (crates/test-servicebus/tests/sdk.rs
#                              makes a venv under target/ and pip-installs the SDK)
#
# Runs as root on Debian (CI does). apt-get update runs once, and only when a package
# is missing.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
# Debian puts RabbitMQ's tools in /usr/sbin.
export PATH="${PATH}:/usr/local/sbin:/usr/sbin:/sbin"

readonly AMQP_PLUGIN=rabbitmq_amqp1_0
readonly AMQP_PORT=5672
readonly STARTUP_SECONDS=120

log() { echo "setup-services: $*"; }
die() { echo "setup-services: error: $*" >&2; exit 1; }

have() { command -v "$1" >/dev/null 2>&1; }

# --- packages -----------------------------------------------------------------
missing=()
have redis-server || missing+=(redis-server)
have redis-cli || missing+=(redis-tools)
have rabbitmq-server || missing+=(rabbitmq-server)
have python3 || missing+=(python3)
# Debian's python3 has no venv (ensurepip) without python3-venv.
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
if ((${#missing[@]} > 0)); then
    log "installing ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    log "redis-server, redis-tools, rabbitmq-server and python3 with venv are installed"
fi
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 \
    || die "python3 cannot make a venv (install python3-venv); the Service Bus SDK check needs it"


# --- RabbitMQ -------------------------------------------------------------------
rabbit_up() { timeout 30 rabbitmq-diagnostics -q ping >/dev/null 2>&1; }

if rabbit_up; then
    log "RabbitMQ is running"
else
    log "starting RabbitMQ"
    rabbitmq-server -detached
    deadline=$((SECONDS + STARTUP_SECONDS))
    until rabbit_up; do
        if ((SECONDS >= deadline)); then
            die "RabbitMQ did not start within ${STARTUP_SECONDS}s; see /var/log/rabbitmq/"
        fi
        sleep 2
    done
    timeout "${STARTUP_SECONDS}" rabbitmqctl -q await_startup \
        || die "RabbitMQ did not finish booting; see /var/log/rabbitmq/"
    log "RabbitMQ started"
fi

enabled_plugins() { timeout 60 rabbitmq-plugins -q list --enabled --minimal; }
plugins=$(enabled_plugins) || die "cannot list RabbitMQ plugins"
if grep -qx "${AMQP_PLUGIN}" <<<"${plugins}"; then
    log "plugin ${AMQP_PLUGIN} is enabled"
else
    log "enabling plugin ${AMQP_PLUGIN}"
    timeout 120 rabbitmq-plugins enable "${AMQP_PLUGIN}"
    plugins=$(enabled_plugins) || die "cannot list RabbitMQ plugins"
    grep -qx "${AMQP_PLUGIN}" <<<"${plugins}" || die "plugin ${AMQP_PLUGIN} did not enable"
fi

# The AMQP listener (0-9-1 and, with the plugin, 1.0 on the same port).
deadline=$((SECONDS + 30))
until timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/${AMQP_PORT}" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
        die "nothing answers on 127.0.0.1:${AMQP_PORT}"
    fi
    sleep 1
done
log "ok: RabbitMQ answers on 127.0.0.1:${AMQP_PORT} with ${AMQP_PLUGIN}; redis-server is $(command -v redis-server)"
