"""falcon resources: the public webhook ingress and the loopback operator API."""
