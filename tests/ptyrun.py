#!/usr/bin/env python3
"""Runs a command on a pseudo-terminal (its stdin, stdout and stderr), as a user at a terminal
would: prints everything the command wrote to the terminal (raw bytes, escape sequences and
carriage returns included) and exits with the command's exit code.

  ptyrun.py [--answer PROMPT TEXT] [--timeout SECONDS] [--stdout-file FILE] -- CMD...

--answer: when the output so far ends with PROMPT (after the last answer), types TEXT and Enter.
--stdout-file: the command's stdout goes to FILE instead (stdin and stderr stay on the terminal),
as in `cmd > file` typed at a terminal.
"""
import argparse, os, pty, select, signal, sys, termios, time

ap = argparse.ArgumentParser()
ap.add_argument("--answer", nargs=2, action="append", default=[], metavar=("PROMPT", "TEXT"))
ap.add_argument("--timeout", type=float, default=120)
ap.add_argument("--stdout-file")
ap.add_argument("cmd", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd

pid, fd = pty.fork()
if pid == 0:
    if a.stdout_file:
        out = os.open(a.stdout_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
    os.execvp(cmd[0], cmd)

answers = list(a.answer)
seen = b""
end = time.time() + a.timeout
while True:
    if time.time() > end:
        os.kill(pid, signal.SIGKILL)
        sys.stdout.buffer.write(seen)
        print("\nptyrun: timed out", file=sys.stderr)
        sys.exit(124)
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        if answers and seen.rstrip().endswith(answers[0][0].encode()):
            # Type once the program has turned echo off (a password prompt does so just after
            # printing the prompt), or after 2 s: a user does not type faster than that.
            wait = time.time() + 2
            while termios.tcgetattr(fd)[3] & termios.ECHO and time.time() < wait:
                time.sleep(0.02)
            os.write(fd, answers[0][1].encode() + b"\n")
            answers.pop(0)
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(seen)
sys.stdout.flush()
sys.exit(os.waitstatus_to_exitcode(status))
