#!/usr/bin/env bash
# S3 storage: the S3A client jars for PySpark 3.5's Hadoop 3.3.4 (hadoop-aws 3.3.1 and the AWS SDK v1
# bundle it was built with), taken from PyPI's sagemaker-pyspark==1.4.5 sdist (it ships them in
# deps/jars/), into <venv>/share/wap-jars where wap_core.lake.s3 finds them. Idempotent; jars are
# never committed. Usage: .ci/s3-deps.sh <venv python>
set -euo pipefail
PY="${1:-.venv/bin/python}"
DEST="$("$PY" -c 'import sys; print(sys.prefix)')/share/wap-jars"
JARS=(hadoop-aws-3.3.1.jar aws-java-sdk-bundle-1.11.901.jar)
have=1; for j in "${JARS[@]}"; do [ -s "$DEST/$j" ] || have=0; done
[ "$have" = 1 ] && exit 0
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
echo "Installing the S3A jars into $DEST (from PyPI sagemaker-pyspark==1.4.5) ..."
"$PY" -m pip download -q --no-deps --no-binary :all: sagemaker-pyspark==1.4.5 -d "$TMP"
mkdir -p "$DEST"
for j in "${JARS[@]}"; do
  tar -xzf "$TMP"/sagemaker_pyspark-1.4.5.tar.gz -C "$TMP" "sagemaker_pyspark-1.4.5/deps/jars/$j"
  mv "$TMP/sagemaker_pyspark-1.4.5/deps/jars/$j" "$DEST/$j.part" && mv "$DEST/$j.part" "$DEST/$j"
done
