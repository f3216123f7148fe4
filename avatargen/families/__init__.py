"""Model families: each folder is one family (its config section, models, build, stages and chunk steps), plugged
into the one chunk engine (avatargen/pipeline/) and named in the registry (avatargen/config/families.py).
docs/architecture.md, "Adding a family", walks through one."""
