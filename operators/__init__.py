"""The Kubernetes operator (kopf) and its CRDs. Imports none of the product packages."""
