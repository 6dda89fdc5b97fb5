"""Distributed compiles through sccache-dist: a loopback cluster for development and tests
(`cluster`: `buildtools dist up/down/status`), the configuration files both sides read
(`config`, pure), the pinned sccache and its helpers (`tools`), and the client side of one
job's build (`client`: the environment that sends its compile units to a scheduler, and the
counts of where they ran)."""
