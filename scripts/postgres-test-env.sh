# Sourced by scripts/test.sh: makes sure a PostgreSQL server answers on this machine and
# exports SVC_TEST_POSTGRES_DSN naming a fresh, empty database for this run; and a second,
# small cluster of its own that one test restarts (SVC_TEST_POSTGRES_RESTART_DSN and
# SVC_TEST_POSTGRES_RESTART_CLUSTER), so restarting it disturbs no other test.
#
# Machines of this kind have PostgreSQL 15 installed with its cluster stopped; the cluster is
# started with pg_ctlcluster. When no PostgreSQL is installed, Debian's package is.

SVC_PG_ROLE="${SVC_PG_ROLE:-svc_test}"
SVC_PG_PASSWORD="${SVC_PG_PASSWORD:-svc_test}"

pg_answers() {
    su postgres -c "psql -qAtc 'SELECT 1'" >/dev/null 2>&1
}

ensure_postgres() {
    if ! command -v pg_ctlcluster >/dev/null 2>&1; then
        say "installing PostgreSQL (Debian package postgresql)"
        apt_install postgresql || die "apt-get install postgresql failed"
    fi
    if ! pg_answers; then
        local cluster
        cluster="$(pg_lsclusters -h 2>/dev/null | awk 'NR==1 {print $1" "$2}')"
        [ -n "$cluster" ] || die "no PostgreSQL cluster exists (pg_lsclusters lists none)"
        say "starting PostgreSQL cluster $cluster"
        # shellcheck disable=SC2086
        pg_ctlcluster $cluster start || die "pg_ctlcluster $cluster start failed; see /var/log/postgresql/"
        local deadline=$((SECONDS + 60))
        until pg_answers; do
            [ "$SECONDS" -lt "$deadline" ] || die "PostgreSQL did not answer within 60 s after starting"
            sleep 0.5
        done
    fi
    local port
    port="$(su postgres -c "psql -qAtc 'SHOW port'")" || die "cannot read PostgreSQL's port"
    su postgres -c "psql -qAtc \"SELECT 1 FROM pg_roles WHERE rolname = '$SVC_PG_ROLE'\"" | grep -q 1 \
        || su postgres -c "psql -qc \"CREATE ROLE $SVC_PG_ROLE LOGIN CREATEDB PASSWORD '$SVC_PG_PASSWORD'\"" >/dev/null \
        || die "cannot create the PostgreSQL role $SVC_PG_ROLE"
    local database="svc_test_$(date +%s)_$$"
    su postgres -c "createdb -O $SVC_PG_ROLE $database" || die "cannot create the database $database"
    # Databases of runs that started over six hours ago are dropped; younger ones may belong to a
    # run still going.
    local cutoff=$(( $(date +%s) - 6 * 3600 ))
    su postgres -c "psql -qAtc \"SELECT datname FROM pg_database WHERE datname LIKE 'svc_test_%'\"" \
        | while read -r old; do
            local started="${old#svc_test_}"
            started="${started%%_*}"
            if [ "$started" -lt "$cutoff" ] 2>/dev/null; then
                su postgres -c "dropdb --if-exists '$old'" >/dev/null 2>&1 || true
            fi
        done
    export SVC_TEST_POSTGRES_DSN="postgres://$SVC_PG_ROLE:$SVC_PG_PASSWORD@127.0.0.1:$port/$database"
    say "PostgreSQL ready: database $database on port $port"
}

# The cluster the restart test may stop and start: created once (it survives between runs),
# started when down, with a fresh database for this run.
SVC_PG_RESTART_CLUSTER_NAME="${SVC_PG_RESTART_CLUSTER_NAME:-svc_restart}"

ensure_restartable_postgres() {
    local name="$SVC_PG_RESTART_CLUSTER_NAME" version port
    version="$(pg_lsclusters -h | awk 'NR==1 {print $1}')"
    [ -n "$version" ] || die "no PostgreSQL cluster exists (pg_lsclusters lists none)"
    if ! pg_lsclusters -h | awk '{print $2}' | grep -qx "$name"; then
        say "creating the PostgreSQL cluster $version $name for the restart test"
        pg_createcluster "$version" "$name" -- --auth-local=peer --auth-host=scram-sha-256 >/dev/null \
            || die "pg_createcluster $version $name failed"
    fi
    port="$(pg_lsclusters -h | awk -v n="$name" '$2 == n {print $3}')"
    if ! su postgres -c "psql -p $port -qAtc 'SELECT 1'" >/dev/null 2>&1; then
        pg_ctlcluster "$version" "$name" start \
            || die "pg_ctlcluster $version $name start failed; see /var/log/postgresql/"
        local deadline=$((SECONDS + 60))
        until su postgres -c "psql -p $port -qAtc 'SELECT 1'" >/dev/null 2>&1; do
            [ "$SECONDS" -lt "$deadline" ] || die "the PostgreSQL cluster $name did not answer within 60 s"
            sleep 0.5
        done
    fi
    su postgres -c "psql -p $port -qAtc \"SELECT 1 FROM pg_roles WHERE rolname = '$SVC_PG_ROLE'\"" | grep -q 1 \
        || su postgres -c "psql -p $port -qc \"CREATE ROLE $SVC_PG_ROLE LOGIN PASSWORD '$SVC_PG_PASSWORD'\"" >/dev/null \
        || die "cannot create the PostgreSQL role $SVC_PG_ROLE in cluster $name"
    su postgres -c "PGOPTIONS='-c client_min_messages=warning' dropdb -p $port --if-exists svc_restart_test && createdb -p $port -O $SVC_PG_ROLE svc_restart_test" \
        || die "cannot create the database svc_restart_test in cluster $name"
    export SVC_TEST_POSTGRES_RESTART_DSN="postgres://$SVC_PG_ROLE:$SVC_PG_PASSWORD@127.0.0.1:$port/svc_restart_test"
    export SVC_TEST_POSTGRES_RESTART_CLUSTER="$version $name"
    say "PostgreSQL cluster $name ready on port $port (restarted by one test)"
}
