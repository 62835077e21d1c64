"""The record contract between the coordinator and the storage node, which both use and
neither owns (docs/architecture.md): the key and record model (model.py), how a record
travels as a log entry's payload and its results come back (codec.py), how the coordinator
reads an answer in either form (answer.py), how a stored
value's key is sized (sizes.py), and the layout of an eventual value's version
(versions.py). It imports nothing of ours but the generated protos and the refusal types
(runtime/refusals.py: a replica that is Behind is one)."""
