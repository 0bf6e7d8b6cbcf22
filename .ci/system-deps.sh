#!/usr/bin/env bash
# Installs the system packages wap_core needs, when missing: Java 17, the SQLite and
# PostgreSQL JDBC drivers; with --test also Debian's Chromium (browser tests) and PostgreSQL 15.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
[ -f /usr/share/java/sqlite-jdbc.jar ] || need+=(libxerial-sqlite-jdbc-java)
[ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
if [ "${1:-}" = "--test" ]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)          # end-to-end browser test
  [ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15) # real PostgreSQL catalog test
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ -n "${WAP_JDBC_JARS:-}" ] && [ "${need[*]}" = "libxerial-sqlite-jdbc-java" ]; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing system packages: ${need[*]}." >&2
  echo "Install them, or point WAP_JDBC_JARS at a JDBC driver jar (e.g. sqlite-jdbc.jar)." >&2
  exit 2
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "Installing system packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
