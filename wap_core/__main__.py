from wap_core.cli import main

raise SystemExit(main())
