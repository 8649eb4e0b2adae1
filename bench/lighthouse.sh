#!/usr/bin/env bash
# Lighthouse's SEO audit of one page of a running site (not part of CI).
#   bench/lighthouse.sh [URL]     default: a deep page of `make run`'s demo data
# Installs Lighthouse into .lighthouse/ (git-ignored) on first use and drives Debian's Chromium
# (CHROME_PATH, default /usr/bin/chromium) headless. Prints the score and every audit that did not
# pass; saves a summary (with the machine) to bench/results/lighthouse-seo.json and the full report
# to bench/results/lighthouse-report.json.tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
LIGHTHOUSE_VERSION=12.8.2  # 13.x needs Node 22
PREFIX=.lighthouse
URL="${1:-http://127.0.0.1:8000/products/KETTLE-2000/?page=292}"
export CHROME_PATH="${CHROME_PATH:-/usr/bin/chromium}"
[ -x "$CHROME_PATH" ] || { echo "Chromium not found at $CHROME_PATH (Debian: apt-get install chromium)" >&2; exit 1; }
if [ ! -x "$PREFIX/node_modules/.bin/lighthouse" ]; then
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "lighthouse@$LIGHTHOUSE_VERSION"
fi
mkdir -p bench/results
report=bench/results/lighthouse-report.json.tmp
"$PREFIX/node_modules/.bin/lighthouse" "$URL" --only-categories=seo --output=json --output-path="$report" \
  --quiet --chrome-flags="--headless --no-sandbox"
python3 - "$report" "$URL" <<'PY'
import json, os, platform, sys
report, url = json.load(open(sys.argv[1])), sys.argv[2]
category = report["categories"]["seo"]
failed = {ref["id"]: report["audits"][ref["id"]]["title"] for ref in category["auditRefs"]
          if report["audits"][ref["id"]]["score"] not in (None, 1)}
summary = {
    "url": url, "lighthouse": report["lighthouseVersion"], "browser": report["environment"]["hostUserAgent"],
    "seo_score": round(category["score"] * 100), "failed_audits": failed,
    "machine": {"cores": os.cpu_count(), "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                "platform": platform.platform()},
    "store": "DynamoDB Local (make run)", "fetched_at": report["fetchTime"],
}
json.dump(summary, open("bench/results/lighthouse-seo.json", "w"), indent=2)
print(f"{'page':<60} {'SEO score':>9}")
print(f"{url:<60} {summary['seo_score']:>9}")
for audit, title in failed.items():
    print(f"  not passed: {audit}: {title}")
PY
