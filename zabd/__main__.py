from zabd.cli import main

raise SystemExit(main())
