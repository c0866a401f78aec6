#!/usr/bin/env bash
# The one-node development platform (no GPU nodes needed until a training run).
exec "$(dirname "${BASH_SOURCE[0]}")/install.sh" dev
