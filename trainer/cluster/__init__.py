"""Runs on several processes and machines: the elastic launcher, admission, the signed rendezvous,
the node table, the studio's trainer process and stop signals."""
