from prore.cli import main

raise SystemExit(main())
