-- 007_tokens: placeholder on branch wt-22c only, so that 008 follows
-- without a gap; part A's 007_tokens.sql replaces this file at the merge.
SELECT 1;
