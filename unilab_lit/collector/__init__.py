"""The collector subprocess (process, prestart, _entry, loop, writers, snapshot) and its learner-side
handle (options, session, link, transport).

Re-exports nothing: a spawn child imports this package before its first line, and the child's
entry module (``_entry``) imports only the standard library at its top.
"""
