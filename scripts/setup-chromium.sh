#!/usr/bin/env bash
# Install (if missing) Debian's Chromium and ChromeDriver for the chat page's
# browser test, and print chromedriver's path on stdout (progress on stderr).
# Idempotent; the install needs root and Debian's package archive (apt-get).
set -euo pipefail
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  exec 9>/tmp/gpack-setup-chromium.lock
  flock 9
  if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >&2
  fi
fi
echo /usr/bin/chromedriver
