from embedlog.cli import main

if __name__ == "__main__":  # not when a worker process (chaos --jobs) imports it
    raise SystemExit(main())
