"""What access control adds to a statement: the token check, a grant check, admission, an audit line.

Each is measured beside what it replaces or is made of, in the same run: the
remembered token check against today's single-token ``compare_digest``; the
first check of a token (and any unknown or wrong one, which must cost the
same) against one bare PBKDF2 of the verifier's iterations; admit+release
against a bare semaphore; a masked audit line against an unmasked one. A
point lookup over HTTP is ~100-200 us, so the per-statement additions must
stay a few microseconds (the PBKDF2 is paid once per token, not per request).
"""

from __future__ import annotations

import hashlib
import hmac
import threading

from benchmarks.common import Figure, percentile, scratch_dir, time_calls

__all__ = ["run"]


def run(quick: bool) -> list[Figure]:
    from gateway.access import Admission, AuditLog, Principal, ScramVerifier, Users
    from gateway.access.tokens import new_token
    from gateway.access.users_file import UserRecord, UsersData, write_users

    n = 2_000 if quick else 20_000
    tmp = scratch_dir("iqgate-bench-access-")
    path = tmp / "users.toml"
    records = {}
    for i in range(201):  # a realistic team: the lookup must not grow with it
        token, token_id = new_token({r.token_id for r in records.values()})
        name = f"user{i}" if i < 200 else "alice"
        records[name] = UserRecord(name, token_id, ScramVerifier.from_password(token), ("finance",))
    write_users(path, UsersData(records, {"finance": ("revenue*",)}, mock_seed="bench"))
    users = Users.load(path)
    assert users.authenticate_token(token) is not None
    single = "x" * 43

    def today() -> None:
        hmac.compare_digest(token.encode(), single.encode())

    remembered = percentile(time_calls(lambda: users.authenticate_token(token), n), 50) * 1e6
    baseline = percentile(time_calls(today, n), 50) * 1e6
    unknown = "iqg_00000000_" + "A" * 43
    first = percentile(time_calls(lambda: users.authenticate_token(unknown), max(50, n // 100), warmup=5), 50) * 1e6
    pbkdf2 = percentile(time_calls(lambda: hashlib.pbkdf2_hmac("sha256", b"x" * 54, b"s" * 16, 4096),
                                   max(50, n // 100), warmup=5), 50) * 1e6

    p = Principal("alice", tuple(f"store_{i}_*" for i in range(20)))
    grant = percentile(time_calls(lambda: p.can_read("store_19_x"), n), 50) * 1e6

    adm = Admission(8)
    sem = threading.BoundedSemaphore(8)

    def admitted() -> None:
        adm.admit("alice", 4).release()

    def bare() -> None:
        sem.acquire()
        sem.release()

    admit = percentile(time_calls(admitted, n), 50) * 1e6
    semaphore = percentile(time_calls(bare, n), 50) * 1e6

    sql = "SELECT customer, revenue FROM revenue WHERE customer = 'c42' AND region IN ('eu', 'us') LIMIT 10"
    plain_log, masked_log = AuditLog(str(tmp / "plain.log")), AuditLog(str(tmp / "masked.log"), mask=True)

    counter = iter(range(10**9))

    def line(log: AuditLog, text: str = sql) -> None:
        log.statement(user="alice", face="http", client="127.0.0.1:5000", sql=text, stores=["revenue"], rows=1,
                      response_bytes=100, duration_ms=0.2, position={"orders": {0: 1, 1: 2}})

    plain = percentile(time_calls(lambda: line(plain_log), n // 4), 50) * 1e6
    masked = percentile(time_calls(lambda: line(masked_log), n // 4), 50) * 1e6
    fresh = percentile(time_calls(lambda: line(masked_log, sql.replace("c42", f"c{next(counter)}")), n // 4),
                       50) * 1e6
    plain_log.close()
    masked_log.close()
    return [
        Figure("access: remembered token check p50 (201 users)", remembered, "us", baseline=baseline,
               baseline_name="single-token compare_digest p50", goal="<= 10 us", met=remembered <= 10,
               note="keyed hash + dict + one stat of the users file"),
        Figure("access: unknown token check p50", first, "us", baseline=pbkdf2,
               baseline_name="one PBKDF2-SHA256 x4096 p50", goal="<= 1.2x", met=first <= 1.2 * pbkdf2,
               note="a first, wrong or unknown token: the same single PBKDF2"),
        Figure("access: can_read over 20 globs p50", grant, "us", goal="<= 5 us", met=grant <= 5),
        Figure("access: admit + release p50", admit, "us", baseline=semaphore,
               baseline_name="BoundedSemaphore acquire+release p50", goal="<= 10 us", met=admit <= 10),
        Figure("access: audit line, literals masked, repeated text p50", masked, "us", baseline=plain,
               baseline_name="audit line, literals kept p50", goal="<= 1.5x", met=masked <= 1.5 * plain,
               note="the masked text of a statement text is remembered"),
        Figure("access: audit line, literals masked, new text p50", fresh, "us", baseline=plain,
               baseline_name="audit line, literals kept p50", goal="<= 200 us", met=fresh <= 200,
               note="tokenizing the statement (sqlglot) is most of it"),
    ]


if __name__ == "__main__":
    from benchmarks.run import script

    script(run)
