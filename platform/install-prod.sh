#!/usr/bin/env bash
# The production platform: GPU nodes, sharded and replicated stores.
exec "$(dirname "${BASH_SOURCE[0]}")/install.sh" prod
